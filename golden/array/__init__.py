"""Golden model of one PE array: the tile-quad schedule, its decode table and cycle model (``docs/array.md``)."""
