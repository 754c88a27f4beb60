"""kaleido-hw: Amaranth generator of the Kaleido vDiT reuse accelerator."""

__version__ = "0.1.0"
