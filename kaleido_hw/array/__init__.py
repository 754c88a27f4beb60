"""The PE arrays and their cells: PEArray, BaselineArray, the per-PE decoders (``docs/array.md``)."""
