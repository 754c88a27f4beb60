"""docs/pe.md section 6: the one-accumulator sketch (the Verilog block) maps to the area and
path the section states, next to the BaselinePE, on the standard-cell flow."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.flow import stdcell


DOC = (Path(__file__).resolve().parents[2] / "docs" / "pe.md").read_text()


@pytest.mark.skipif(stdcell.stdcell_available() is not None,
                    reason=f"standard-cell flow unavailable: {stdcell.stdcell_available()}")
def test_one_accumulator_sketch_figures():
    (verilog,) = re.findall(r"```verilog\n(.*?)```", DOC, flags=re.S)
    area = float(re.search(r"sketch below, mapped by the same flow, is\s+([\d,]+) um2",
                           DOC).group(1).replace(",", ""))
    path = float(re.search(r"um2 and ([\d.]+) ns: \*\*", DOC).group(1))
    sketch = stdcell.synth_stdcell("delta_pe", KaleidoConfig(), verilog=verilog)
    base = stdcell.synth_stdcell("baseline_pe", KaleidoConfig())
    assert sketch.area_um2 == pytest.approx(area, rel=0.01)
    assert sketch.path_ns == pytest.approx(path, rel=0.02)
    assert sketch.area_um2 / base.area_um2 == pytest.approx(1.30, abs=0.01)
    assert sketch.path_ns / base.path_ns == pytest.approx(1.10, abs=0.01)
