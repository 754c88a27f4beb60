"""Golden models of the engines: functional and cycle models, the linear layers, the dispatcher invariants (``docs/engine.md``, ``docs/linear.md``)."""
