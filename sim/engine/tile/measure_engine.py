"""cocotb measurement run of ``tile_engine`` for ``kaleido-hw tile-report``: runs the jobs
of a JSON file (``KALEIDO_TILE_JOBS``), checks S bit-exact against the golden model and
writes the counters read back from the RTL to the file named in the job list.

Not a bench of ``make test``: ``tile-report --rtl`` runs it through ``sim/runner.run_bench``.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import cocotb
import numpy as np
from engine_host import EngineHost, load_config
from simlib import start_clock_and_reset

from golden.numerics import ChannelGroups, VideoGrid, attention_scores


@cocotb.test()
async def measure(dut):
    jobs = json.loads(Path(os.environ["KALEIDO_TILE_JOBS"]).read_text())
    await start_clock_and_reset(dut)
    host = EngineHost(dut, load_config())
    results = []
    for job in jobs["runs"]:
        arrays = np.load(job["npz"])
        q, k = arrays["q"], arrays["k"]
        grid = VideoGrid(*job["grid"])
        groups = ChannelGroups.from_preset(job["preset"])
        out = await host.run(q, k, grid, groups, reuse=job["reuse"],
                             max_cycles=job["max_cycles"])
        assert out["error"] == 0, f"{job['name']}: rejected (error {out['error']:#x})"
        s = await host.read_scores(grid.n)
        want = (attention_scores(q, k, grid, groups) if job["reuse"]
                else q.astype(np.int64) @ k.astype(np.int64).T)
        assert np.array_equal(s, want), f"{job['name']}: S differs from the golden model"
        results.append({"name": job["name"], "counters": out["counters"]})
        dut._log.info(f"{job['name']}: {out['counters']['cycles']} cycles")
    Path(jobs["out"]).write_text(json.dumps(results, indent=1) + "\n")
