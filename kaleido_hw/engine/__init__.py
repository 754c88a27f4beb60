"""The engines: sequencers, code units, buffers and the engine tops (``docs/engine.md``, ``docs/linear.md``)."""
