"""`vmss-terminate demo --central [--windows]`: the story with no agent in any instance."""

from __future__ import annotations

import json

import pytest
from helpers import invoke_cli

from vmss_terminate.cli import main

pytestmark = pytest.mark.timeout(180)


@pytest.mark.slow  # a whole demo on scaled real time
def test_demo_central_windows_runs_hooks_and_run_commands_then_acknowledges() -> None:
    result = invoke_cli(main, ["demo", "--central", "--windows", "--instances", "4", "--scale-in", "3",
                               "--speed", "20", "-o", "json"])
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["ok"] and data["options"]["central"] and data["options"]["windows"]
    totals = data["totals"]
    assert totals["central_hooks_ok"] == 3 and totals["central_run_commands"] == 3
    assert totals["central_acknowledged"] == 3 and totals["deleted"] == 3 and totals["agents"] == 0
    assert not any(e["source"] == "agent" for e in data["timeline"])


def test_demo_windows_needs_central() -> None:
    result = invoke_cli(main, ["demo", "--windows"])
    assert result.exit_code == 2 and "--central" in result.stderr
