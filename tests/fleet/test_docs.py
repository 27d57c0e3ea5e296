"""docs/fleet.md: every `vmss-terminate fleet|render` command it shows runs, against the emulator
serving examples/fleet-seed.json, with the documented exit code."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import List

import pytest

from vmss_terminate_sim.emulator.arm.app import ArmServers

from .conftest import ROOT, run

DOC = ROOT / "docs" / "fleet.md"


def _commands() -> List[List[str]]:
    found = []
    for raw in DOC.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("vmss-terminate fleet ") or line.startswith("vmss-terminate render "):
            words = shlex.split(line.split(" > ")[0], comments=True)
            found.append(words[1:])
    return found


def test_the_doc_shows_the_workflow() -> None:
    shown = {" ".join(words[:2]) for words in _commands()}
    assert {"fleet audit", "fleet rollout", "render --format"} <= shown


@pytest.mark.parametrize("words", _commands(), ids=" ".join)
def test_documented_commands_run(words: List[str], arm: ArmServers, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    result = run(*words)
    expected = 2 if "--detailed-exitcode" in words else 0
    assert result.exit_code == expected, result.output


def test_the_workflow_in_order_passes_its_gate(arm: ArmServers, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 28 item 8: run in the doc's order on one estate, the rollout skips the Spot, AKS-managed
    and instance-less Flexible sets it must not or cannot change, and a gate without
    --ignore-finding for them failed (exit 2) after a successful rollout; the doc's gate step after
    the rollout passes."""
    monkeypatch.chdir(tmp_path)
    commands = _commands()
    rollout = next(w for w in commands if w[:2] == ["fleet", "rollout"] and "--journal" in w)
    gates = [w for w in commands if w[:2] == ["fleet", "audit"] and "--detailed-exitcode" in w
             and "--ignore-finding" in w]
    assert gates, "the doc shows no gate step that accepts what a rollout skips"
    done = run(*rollout)
    assert done.exit_code == 0, done.output
    for gate in gates:
        result = run(*gate)
        assert result.exit_code == 0, result.output
