"""``kaleido-hw``: the command line. Each command lives in its own module, which provides
``add_arguments(parser)`` and ``run(args) -> int``; bad input exits 2 with one line that names
the problem and the allowed values."""

from __future__ import annotations

import argparse
import importlib
import sys


#: (command, module, one-line help)
COMMANDS = [
    ("generate", "kaleido_hw.flow.generate", "write the Verilog of every block and manifest.json to rtl_out/"),
    ("lint", "kaleido_hw.flow.lint", "run verilator --lint-only -Wall on the generated Verilog"),
    ("program", "kaleido_hw.flow.program", "engine core files for an SoC bench: command words, memory images, expected counters, a plain Verilog testbench"),
    ("analyze", "kaleido_hw.reports.analyze", "reuse fractions, oracle QK^T reduction and quality of one attention head"),
    ("bench", "kaleido_hw.reports.bench", "time the golden model: 720p reuse analysis and exact S throughput"),
    ("synth", "kaleido_hw.flow.synth", "OSU 0.18 um area, critical path and power, iCE40 LUTs and fmax of the PEs, arrays and dispatcher blocks (--engine: whole engine)"),
    ("engine-report", "kaleido_hw.reports.engine_report", "multi-array KaleidoEngine: ablation of the dispatcher variants, array scaling, the paper-scale head (cycle model)"),
    ("dataflow", "kaleido_hw.reports.dataflow_report", "dataflow study of issue 15: candidate pass structures and matchers against the ceiling (cycle model)"),
    ("linear-report", "kaleido_hw.reports.linear_report", "linear layers on the arrays: speedup alone and with attention (paper Fig. 20 analogue)"),
    ("dispatch-report", "kaleido_hw.reports.dispatch_report", "Hamming spread and merge efficiency of the data dispatcher on the synthetic workloads"),
    ("report", "kaleido_hw.reports.report", "plots + JSON/CSV reproducing the paper's figures (reuse vs skip, thresholds, patterns, motion, array size, area)"),
]


class _OneLineHelp(argparse.HelpFormatter):
    """Help formatter that puts each command and its help on one line, whatever the terminal."""

    def __init__(self, prog):
        super().__init__(prog, max_help_position=40, width=1000)

    def add_argument(self, action):
        super().add_argument(action)
        if isinstance(action, argparse._SubParsersAction):
            # argparse measures the command names one indentation level too shallow
            self._action_max_length += self._indent_increment


def build_parser() -> argparse.ArgumentParser:
    """The ``kaleido-hw`` parser: one sub-command per entry of :data:`COMMANDS`."""
    parser = argparse.ArgumentParser(
        prog="kaleido-hw", formatter_class=_OneLineHelp,
        description="Generator, golden model and reports of the Kaleido vDiT reuse accelerator.",
        epilog="Run 'kaleido-hw COMMAND --help' for the options of a command.")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name, module, help_text in COMMANDS:
        p = sub.add_parser(name, help=help_text, description=help_text)
        p.set_defaults(_module=module)
        importlib.import_module(module).add_arguments(p)
    return parser


def main(argv=None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv``); return the exit status."""
    args = build_parser().parse_args(argv)
    module = importlib.import_module(args._module)
    try:
        return module.run(args)
    except ValueError as e:   # ConfigError and every golden-model input check
        print(f"kaleido-hw {args.command}: error: {e}", file=sys.stderr)
        return 2
