import sys
from pathlib import Path


REPO = Path(__file__).resolve().parents[1]
# Shared test harnesses (tests/) and bench helpers (sim/ and its block folders).
for folder in (REPO / "tests", REPO / "sim", REPO / "sim" / "pe", REPO / "sim" / "dispatch",
               REPO / "sim" / "engine"):
    sys.path.insert(0, str(folder))

from runner import tool_env  # noqa: E402


tool_env()
