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
