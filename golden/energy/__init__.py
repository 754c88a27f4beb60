"""Energy model of the engine: cycle-model counters x per-event energies (``docs/energy.md``)."""
