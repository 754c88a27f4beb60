"""Golden model of the PEs: the cycle models and the operating points (``docs/pe.md``)."""
