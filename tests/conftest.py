import os
import sys
from pathlib import Path

import pytest


REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "sim"))
from runner import HELPER_DIRS, tool_env  # noqa: E402

# Shared test harnesses (tests/) and bench helpers (sim/ and its block folders, the runner's
# list).
for folder in (REPO / "tests", *HELPER_DIRS):
    sys.path.insert(0, str(folder))


tool_env()

#: ``KALEIDO_ENGINE_SET=full`` (``make regress``) runs the cases marked ``full_set``: the
#: larger builds and the longer parametrizations, which ``make test`` leaves out to stay in
#: its time budget (one case of each kind stays in it).
FULL_SET = os.environ.get("KALEIDO_ENGINE_SET", "") == "full"


def pytest_collection_modifyitems(config, items):
    if FULL_SET:
        return
    skip = pytest.mark.skip(reason="long case: make regress runs it (KALEIDO_ENGINE_SET=full)")
    for item in items:
        if "full_set" in item.keywords:
            item.add_marker(skip)
