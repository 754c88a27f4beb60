"""The vector unit: row-wise integer softmax (``docs/vector.md``)."""
