"""The data dispatcher: ClusterScheduler, MergeMatcher, the engine's OrderUnit and SlotUnit, and the merge-capable cells (``docs/dispatch.md``)."""
