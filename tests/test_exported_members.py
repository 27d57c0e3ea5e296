"""Every package face is pinned (httpx's tests/test_exported_members.py is the model): its
`__all__` is exactly what the package exposes -- no public name imported into an `__init__.py`
without being listed, none listed that is not there -- and everything docs/python-api.md's tables
name for a package is exported by it (or is one of its modules).

Packages are found on disk, so a new package (`vmss_terminate/pipeline/`, ...) is covered the
moment it exists: it fails here until its `__init__.py` says `__all__` (an empty list for a face
that exports nothing)."""

from __future__ import annotations
import __future__

import importlib
import re
from pathlib import Path
from types import ModuleType
from typing import Dict, List

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOPS = ("vmss_terminate", "vmss_terminate_sim")
INCLUDED_PRIVATE_MEMBERS = ("__version__",)
PACKAGES = sorted(".".join(init.parent.relative_to(ROOT).parts) for top in TOPS for init in (ROOT / top).rglob("__init__.py"))


def _exposed(module: ModuleType) -> List[str]:
    """The public names an `__init__.py` binds: not its sub-modules (bound by any import of them),
    not `from __future__ import annotations`."""
    return sorted(name for name, value in vars(module).items()
                  if (not name.startswith("_") or name in INCLUDED_PRIVATE_MEMBERS)
                  and not isinstance(value, (ModuleType, __future__._Feature)))


@pytest.mark.parametrize("package", PACKAGES)
def test_all_is_exactly_what_the_package_exposes(package: str) -> None:
    module = importlib.import_module(package)
    assert hasattr(module, "__all__"), f"{package}: pin its face with __all__ (an empty list if it exports nothing)"
    exported = list(module.__all__)
    assert len(set(exported)) == len(exported), f"{package}: a name listed twice in __all__"
    assert sorted(exported) == _exposed(module), package


def _documented() -> Dict[str, List[str]]:
    """Per package section of docs/python-api.md, the names its table's first column starts with
    (`Scope.build(...)` -> Scope; `enable` / `retime(...)` -> enable, retime)."""
    text = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    found: Dict[str, List[str]] = {}
    for section in re.split(r"^## ", text, flags=re.MULTILINE)[1:]:
        heading = section.split("\n", 1)[0].strip().strip("`")
        if heading not in PACKAGES:
            continue
        for row in re.findall(r"^\| (.+?) (?<!\\)\|", section, flags=re.MULTILINE):
            for span in re.findall(r"`([^`]+)`", row):
                name = re.match(r"[A-Za-z_][A-Za-z0-9_]*", span)
                if name and name.group(0) not in ("name",):
                    found.setdefault(heading, []).append(name.group(0))
    return found


DOCUMENTED = _documented()


def test_the_doc_tables_are_read() -> None:
    """The parser above finds the tables (a guard against it silently finding nothing)."""
    assert {"vmss_terminate.control", "vmss_terminate.fleet", "vmss_terminate_sim.emulator.arm"} <= set(DOCUMENTED)
    assert "rollout" in DOCUMENTED["vmss_terminate.fleet"] and "Scope" in DOCUMENTED["vmss_terminate.fleet"]


@pytest.mark.parametrize("package", sorted(DOCUMENTED))
def test_everything_the_python_api_doc_names_is_exported(package: str) -> None:
    """`fleet.rollout` was documented (as `vmss_terminate.fleet.rollout.rollout`) but not exported."""
    module = importlib.import_module(package)
    missing = []
    for name in DOCUMENTED[package]:
        if name in module.__all__:
            continue
        try:  # a module of the package, named as such (`probes.serve(...)`)
            importlib.import_module(f"{package}.{name}")
        except ImportError:
            missing.append(name)
    assert missing == [], f"docs/python-api.md names these under {package} but it does not export them"
