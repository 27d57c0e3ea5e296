"""`vmss-terminate demo --central [--windows]`: the story with no agent in any instance."""

from __future__ import annotations

import json

import pytest
from helpers import invoke_cli

from vmss_terminate.cli import main
from vmss_terminate.clock import ManualClock
from vmss_terminate_sim.emulator.kube import ApiError, KubeState
from vmss_terminate_sim.sandbox.demo import budget_honoured

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


def test_demo_central_kubernetes_checks_the_budget_from_the_api_servers_evictions() -> None:
    """`demo --central --kubernetes` fails unless the story's PDB answered an eviction 429 and the
    handler retried that pod until allowed: read from the API server's record (a real KubeState)."""
    clock = ManualClock()
    state = KubeState(clock=clock)
    state.add_node("n1")
    state.add_replicaset("web", 2, labels={"app": "web"})
    for slot in ("a", "b"):
        state.add_pod(f"web-{slot}", "n1", labels={"app": "web"}, owner="ReplicaSet/web", grace=20)
    state.add_pdb("web", selector={"app": "web"}, max_unavailable=1)
    assert budget_honoured(state.evictions) == "no eviction was held back by the PodDisruptionBudget"
    state.evict("default", "web-a", {})
    with pytest.raises(ApiError):
        state.evict("default", "web-b", {})  # 429: web-a is terminating
    assert budget_honoured(state.evictions) == (
        "evictions refused by the PodDisruptionBudget were not retried until allowed: web-b")
    clock.advance(21)  # web-a is gone and replaced
    state.evict("default", "web-b", {})
    assert [e.code for e in state.evictions] == [200, 429, 200]
    assert budget_honoured(state.evictions) is None
