"""Help text of the command line: ``kaleido-hw --help`` lists every command of
``kaleido_hw.cli.COMMANDS`` on one line with its help, every command's ``--help`` works, and
every option and positional argument of every command says what it does. In-process (argparse
only, nothing runs), except one check of the installed entry point."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import subprocess
import sys

import pytest

from kaleido_hw import cli


NAMES = [name for name, _, _ in cli.COMMANDS]
#: A command's one-line help stays readable in a listing.
MAX_HELP = 140


@pytest.fixture(scope="module")
def parser():
    return cli.build_parser()


def _subparsers(parser) -> dict[str, argparse.ArgumentParser]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return action.choices


def _help_output(argv) -> str:
    """stdout of ``kaleido-hw ARGV --help``; asserts that it exits 0."""
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        cli.main(argv)
    assert exit_info.value.code == 0, f"kaleido-hw {' '.join(argv)} exited {exit_info.value.code}"
    return out.getvalue()


def test_commands_are_unique_and_have_one_line_help():
    assert len(NAMES) == len(set(NAMES)), "duplicate command names in COMMANDS"
    for name, module, help_text in cli.COMMANDS:
        assert re.fullmatch(r"[a-z][a-z0-9-]*", name), f"command name {name!r}"
        assert help_text.strip(), f"{name}: empty help"
        assert "\n" not in help_text and len(help_text) <= MAX_HELP, \
            f"{name}: help must be one line of at most {MAX_HELP} characters"


def test_top_level_help_lists_every_command_on_one_line():
    text = _help_output(["--help"])
    for name, _, help_text in cli.COMMANDS:
        line = re.compile(rf"^ +{re.escape(name)} +{re.escape(help_text)}$", re.M)
        assert line.search(text), f"'kaleido-hw --help' does not show {name!r} with its help on one line"
    assert len(re.findall(r"^    \S", text, re.M)) == len(NAMES), "unexpected lines in the command list"


@pytest.mark.parametrize("name", NAMES)
def test_command_help_works(name):
    text = _help_output([name, "--help"])
    assert text.startswith(f"usage: kaleido-hw {name}"), text[:200]
    help_text = dict((n, h) for n, _, h in cli.COMMANDS)[name]
    assert " ".join(help_text.split()) in " ".join(text.split()), "description missing"


def options_without_help(parser: argparse.ArgumentParser) -> list[str]:
    """Options and positionals of ``parser`` whose help is missing, blank or suppressed."""
    return [a.option_strings[0] if a.option_strings else a.dest
            for a in parser._actions
            if not isinstance(a, argparse._HelpAction)
            and (not (a.help or "").strip() or a.help == argparse.SUPPRESS)]


@pytest.mark.parametrize("name", NAMES)
def test_every_option_has_help(name, parser):
    lacking = options_without_help(_subparsers(parser)[name])
    assert not lacking, f"kaleido-hw {name}: options without help text: {lacking}"


def test_checker_sees_an_option_without_help():
    """The check above can fail: options added without help are reported."""
    p = argparse.ArgumentParser()
    p.add_argument("path", help="a file")
    p.add_argument("--documented", help="does something")
    p.add_argument("--bare")
    p.add_argument("--hidden", help=argparse.SUPPRESS)
    p.add_argument("count")
    assert options_without_help(p) == ["--bare", "--hidden", "count"]


def test_entry_point_help():
    r = subprocess.run([sys.executable, "-m", "kaleido_hw", "--help"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    assert all(name in r.stdout for name in NAMES)
