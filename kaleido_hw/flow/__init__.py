"""Generation, lint and synthesis flows: Verilog and manifest, Verilator lint, the standard-cell and iCE40 flows (``docs/integration.md``)."""
