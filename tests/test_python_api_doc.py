"""docs/python-api.md: every example runs as written, and every package has a section.

Each example runs in a fresh interpreter (as a reader would paste it), from an empty directory,
against the emulators it starts itself on loopback; the ambient Azure and proxy variables are
already removed by the suite's autouse guard.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path
from typing import List, Tuple

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "python-api.md"


def _examples() -> List[Tuple[str, str]]:
    """(section heading, code) of every ```python block."""
    found, section = [], ""
    for match in re.finditer(r"^## ([^\n]+)$|^```python\n(.*?)^```$", DOC.read_text(encoding="utf-8"),
                             re.MULTILINE | re.DOTALL):
        if match.group(1):
            section = match.group(1).strip("` ")
        else:
            found.append((section, match.group(2)))
    return found


def _packages() -> List[str]:
    return sorted(f"{top}.{p.parent.name}" for top in ("vmss_terminate", "vmss_terminate_sim")
                  for p in (ROOT / top).glob("*/__init__.py"))


def test_every_package_has_a_section_with_an_example() -> None:
    sections = {section for section, _ in _examples()}
    # the emulator package is documented through its sub-packages; commands is the CLI's
    wanted = [p for p in _packages()
              if p not in ("vmss_terminate_sim.emulator", "vmss_terminate.commands", "vmss_terminate_sim.commands")]
    wanted += ["vmss_terminate", "vmss_terminate_sim.emulator.imds", "vmss_terminate_sim.emulator.arm",
               "vmss_terminate_sim.emulator.kube"]
    assert sorted(set(wanted) - sections) == []


@pytest.mark.parametrize("section,code", _examples(), ids=[s for s, _ in _examples()])
def test_example_runs_as_written(section: str, code: str, tmp_path: Path) -> None:
    result = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True,
                            timeout=90)
    assert result.returncode == 0, f"{section}:\n{result.stderr[-3000:]}"
