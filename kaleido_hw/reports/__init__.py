"""Reports and analyses: the paper-figure reports (``make report``), the engine, linear, tile and dispatch reports, the golden-model benchmark."""
