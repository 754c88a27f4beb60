"""Time the conversion of one top both ways, side by side in one process: the whole design
converted and then merged (``kaleido_hw.flow.dedup``), and with its repeated blocks built
once (``kaleido_hw.flow.shared_modules``). Both give the same logic; the second is what
``make verilog`` does.

    .venv/bin/python tools/time_generation.py [TOP] [--runs N]

Prints the median seconds of N runs (default 1) of each and the Verilog sizes.
"""

from __future__ import annotations

import argparse
import statistics
import time

from kaleido_hw.config import KaleidoConfig
from kaleido_hw.flow.dedup import share_identical_modules
from kaleido_hw.flow.generate import TOPS, build_top, emit_verilog


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("top", nargs="?", default="kaleido_core",
                        choices=[t.module for t in TOPS])
    parser.add_argument("--runs", type=int, default=1)
    args = parser.parse_args()
    top = next(t for t in TOPS if t.module == args.top)
    ways = {"whole, then merged":
            lambda c: share_identical_modules(emit_verilog(c, top.module)),
            "shared blocks": lambda c: emit_verilog(c, top.module, share=True)}
    for label, convert in ways.items():
        times = []
        for _ in range(args.runs):
            t0 = time.monotonic()
            text = convert(build_top(top, KaleidoConfig()))
            times.append(time.monotonic() - t0)
        print(f"{top.module}, {label}: {statistics.median(times):.1f} s "
              f"(median of {args.runs}), {len(text):,} bytes of Verilog")


if __name__ == "__main__":
    main()
