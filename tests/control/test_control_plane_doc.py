"""docs/control-plane.md: its Python example runs as written (a fresh interpreter, the environment
the library reads set as `vmss-terminate emulator arm` prints it) against the ARM emulator."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path
from typing import List

import pytest

from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import SUB

DOC = Path(__file__).resolve().parents[2] / "docs" / "control-plane.md"


def _examples() -> List[str]:
    return re.findall(r"^```python\n(.*?)^```$", DOC.read_text(encoding="utf-8"), re.MULTILINE | re.DOTALL)


def test_the_doc_has_a_python_example() -> None:
    assert _examples()


@pytest.mark.parametrize("code", _examples())
def test_control_plane_doc_python_example_runs_as_written(code: str, arm: ArmServers, state: ArmState,
                                                          tmp_path: Path) -> None:
    state.add_scale_set(SUB, "my-rg", "my-vmss", capacity=4)
    # arm fixture: IDENTITY_ENDPOINT & co, VMSS_TERMINATE_ARM_ENDPOINT and AZURE_SUBSCRIPTION_ID
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=90)
    assert result.returncode == 0, result.stderr[-3000:]
    printed = ast.literal_eval(result.stdout.strip().splitlines()[-1])  # print(dict)
    assert printed["changed"] is True
    assert "PT10M" in str(printed.get("after")), printed  # read back from the emulator
