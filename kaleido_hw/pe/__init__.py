"""The processing elements: ReusePE (the reuse-aware MAC) and BaselinePE (``docs/pe.md``)."""
