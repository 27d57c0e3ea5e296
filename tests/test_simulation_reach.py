"""Everything `vmss_terminate_sim` ships is there for users: each of its modules is reached, through
imports, from what a user runs or imports -- the `emulator`, `sandbox` and `demo` commands (registered
by module name in `vmss_terminate/cli.py` and the emulator group), a module shipped code runs with
`python -m`, and the package faces docs/python-api.md documents. A module only the tests reach
belongs in `tests/` (docs/architecture.md, "What the simulation ships, and for whom")."""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path
from typing import Dict, Set

ROOT = Path(__file__).resolve().parents[1]
SIM = ROOT / "vmss_terminate_sim"
NAMED = re.compile(r"\bvmss_terminate_sim(?:\.\w+)+")
PENDING: Dict[str, str] = {}
"""Modules only the tests reach for now, each with the work that will wire it (issue 26's Azurite
installer and Event Grid delivery were here until `sandbox --central --source queue` started them)."""


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module_name(p): p for p in SIM.rglob("*.py")}


@functools.cache
def _imports(name: str) -> Set[str]:
    """The simulation modules `name` imports (also inside functions) or names as a string (a lazily
    registered command, a `python -m` target)."""
    path = MODULES[name]
    text = path.read_text(encoding="utf-8")
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = {m for m in NAMED.findall(text) if m in MODULES}
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name in MODULES}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1] + ([base] if base else []))
            for candidate in [base] + [f"{base}.{a.name}" for a in node.names]:
                if candidate in MODULES:
                    found.add(candidate)
    return {m for name_ in found for m in _with_parents(name_)}


def _with_parents(name: str) -> Set[str]:
    """Importing `a.b.c` runs `a/__init__.py` and `a/b/__init__.py` too."""
    parts = name.split(".")
    return {".".join(parts[:i]) for i in range(1, len(parts) + 1) if ".".join(parts[:i]) in MODULES}


def _entries() -> Set[str]:
    cli = (ROOT / "vmss_terminate" / "cli.py").read_text(encoding="utf-8")
    doc = (ROOT / "docs" / "python-api.md").read_text(encoding="utf-8")
    faces = {m for m in re.findall(r"^## `(vmss_terminate_sim[\w.]*)`", doc, flags=re.MULTILINE) if m in MODULES}
    return {m for m in NAMED.findall(cli) if m in MODULES} | faces


@functools.cache
def _reached() -> Set[str]:
    reached: Set[str] = set()
    todo = {m for e in _entries() for m in _with_parents(e)}
    while todo:
        name = todo.pop()
        if name not in reached:
            reached.add(name)
            todo |= _imports(name) - reached
    return reached


def test_every_simulation_module_is_reached_from_what_users_run_or_import() -> None:
    unreached = sorted(set(MODULES) - _reached() - set(PENDING))
    assert unreached == [], "only the tests reach these: move them under tests/, or wire them to a command"


def test_the_pending_list_is_still_true() -> None:
    assert [m for m in PENDING if m in _reached() or m not in MODULES] == []


def test_the_walk_starts_where_users_start() -> None:
    """The guard can fail: the entries are the commands and the documented faces, and the walk
    follows relative, lazy and string imports (the demo's hook is run with `python -m`)."""
    entries = _entries()
    assert {"vmss_terminate_sim.commands.emulator", "vmss_terminate_sim.commands.sandbox",
            "vmss_terminate_sim.emulator.arm", "vmss_terminate_sim.sandbox"} <= entries
    reached = _reached()
    assert {"vmss_terminate_sim.demo_hook", "vmss_terminate_sim.emulator.kube.protobuf",
            "vmss_terminate_sim.commands.emulator_arm"} <= reached
