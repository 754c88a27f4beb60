"""Golden model of the data dispatcher: scheduler and matcher, bit- and cycle-exact (``docs/dispatch.md``)."""
