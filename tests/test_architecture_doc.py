"""docs/architecture.md describes the tree as it is: every module of the package is listed there,
and every module path it names exists. Add a module, list it; move one, move its line.

Paths on the page are relative to `vmss_terminate/` (`agent/policy.py`), or to the repository
(`tests/conftest.py`, and the simulation's `vmss_terminate_sim/emulator/imds/app.py`); a package's
`__init__.py` is named as such (`vmss_terminate_sim/emulator/imds/__init__.py`).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import List, Set

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vmss_terminate"
SIM = ROOT / "vmss_terminate_sim"
DOC = ROOT / "docs" / "architecture.md"
PATH = re.compile(r"(?<![\w./-])((?:[\w-]+/)*[\w-]+\.py)(?![\w/])")


def _named(text: str) -> Set[str]:
    return set(PATH.findall(text))


def _modules() -> List[str]:
    return sorted([*(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*.py")),
                   *(p.relative_to(ROOT).as_posix() for p in SIM.rglob("*.py"))])


def test_every_module_is_listed() -> None:
    named = _named(DOC.read_text(encoding="utf-8"))
    assert [m for m in _modules() if m not in named] == []


def test_every_named_module_exists() -> None:
    named = _named(DOC.read_text(encoding="utf-8"))
    assert sorted(p for p in named if not (PACKAGE / p).is_file() and not (ROOT / p).is_file()) == []


def test_the_path_pattern_reads_the_page_the_way_it_is_written() -> None:
    """The guard can fail: a nested path, a root module and a repository path are each one name."""
    text = "`emulator/imds/app.py`, `cli.py` and tests/conftest.py; not vmss_terminate.agent or x.pyc"
    assert _named(text) == {"emulator/imds/app.py", "cli.py", "tests/conftest.py"}


def test_every_test_folder_is_named() -> None:
    """"Outside the package" lists the folders of `tests/` (it had left out emulator_kube and az)."""
    outside = DOC.read_text(encoding="utf-8").split("## Outside the package", 1)[1]
    folders = sorted(p.name for p in (ROOT / "tests").iterdir() if (p / "__init__.py").is_file())
    assert [f for f in folders if f"`tests/{f}/`" not in outside] == []
