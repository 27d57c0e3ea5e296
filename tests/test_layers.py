"""Layers guarded whole: one allow-list, `LAYERS`, says for every package and every module at the
package root what it may import, and everything else is refused.

* Every import statement of every file counts (imports inside functions, where lazy imports hide,
  and `if TYPE_CHECKING:` ones too), relative imports resolved.
* `LAYERS` is ordered from the top down and a row may only name rows below it, so the table itself
  has no upward arrow and no circle; no two modules import each other, directly or round a circle.
* A new package (any folder with an `__init__.py`) or root module must get its own row: the test
  names what is missing. The same table is printed in docs/architecture.md; after changing it run
  `python tests/test_layers.py --write` (a test keeps page and table equal).
* At run time: what a fresh interpreter has loaded after importing the agent, or running the
  agent's CLI against an IMDS emulator, stays inside what the agent's row allows.
"""

from __future__ import annotations

import ast
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Set, Tuple

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vmss_terminate"
SIM = ROOT / "vmss_terminate_sim"
"""The simulation (emulators, sandbox, demo): a package of its own on top of the product. Its rows are
named from the repository root (`vmss_terminate_sim/sandbox/`); the product's from its package."""
TOPS = {"vmss_terminate": PACKAGE, "vmss_terminate_sim": SIM}
DOC = ROOT / "docs" / "architecture.md"
PROGRAM = "python tests/test_layers.py --write"

SHARED = "shared modules"
"""Stands for the rows of the shared modules at the package root (`SHARED_MODULES`) in a row's list."""

SHARED_MODULES = ("__init__.py", "extras.py", "timeout.py", "params.py", "signals.py", "scheduled_events.py",
                  "clock.py", "net.py", "errors.py")

EXTERNAL = {
    "azure": "`azure` (the Azure SDK)",
    "click": "`click`",
    "requests": "`requests`",
    "urllib3": "`urllib3` (requests' own)",
}
"""Third-party packages a row may name; any other import outside the standard library fails."""

# Who may import whom, from the top down. A row is a package (`name/`, its files) or a module at the
# package root (`name.py`); its list names the rows (or single modules of a row, `control/body.py`)
# and the third-party packages it may import besides itself and the standard library. A row may
# name only rows below it.
LAYERS: Dict[str, Tuple[str, ...]] = {
    "vmss_terminate_sim/commands/": ("vmss_terminate_sim/sandbox/", "vmss_terminate_sim/azurite.py", "vmss_terminate_sim/emulator/arm/",
                                     "vmss_terminate_sim/emulator/imds/", "vmss_terminate_sim/emulator/kube/",
                                     "vmss_terminate_sim/emulator/", "commands/", "control/", "agent/", SHARED,
                                     "click"),
    "vmss_terminate_sim/sandbox/": ("vmss_terminate_sim/azurite.py", "vmss_terminate_sim/emulator/arm/",
                                    "vmss_terminate_sim/emulator/imds/", "vmss_terminate_sim/emulator/kube/",
                                    "vmss_terminate_sim/emulator/", "central/", "fleet/", "control/", "agent/",
                                    "pipeline/", SHARED),
    "vmss_terminate_sim/emulator/arm/": ("vmss_terminate_sim/emulator/", SHARED),
    "vmss_terminate_sim/emulator/imds/": ("vmss_terminate_sim/emulator/", SHARED),
    "vmss_terminate_sim/emulator/kube/": ("vmss_terminate_sim/emulator/", SHARED),
    "vmss_terminate_sim/emulator/": (SHARED,),
    "vmss_terminate_sim/azurite.py": (),
    "vmss_terminate_sim/demo_hook.py": (),
    "vmss_terminate_sim/__init__.py": (),
    "__main__.py": ("entry.py",),
    "entry.py": ("cli.py", "agent/", "signals.py", "commands/helptexts.py"),
    "cli.py": ("commands/", SHARED, "click"),
    "commands/": ("central/", "fleet/", "iac/", "control/", "agent/", SHARED, "click"),
    "central/": ("fleet/", "control/", "pipeline/", SHARED, "azure"),
    "fleet/": ("control/", SHARED, "azure"),
    "iac/": ("control/body.py", "control/events_policy.py", SHARED),
    "control/": (SHARED, "azure", "requests"),
    "agent/": ("pipeline/", SHARED, "requests", "urllib3"),
    "pipeline/": (SHARED, "requests", "urllib3"),
    "__init__.py": ("errors.py",),
    "extras.py": ("errors.py",),
    "timeout.py": ("errors.py",),
    "params.py": ("errors.py",),
    "signals.py": ("errors.py",),
    "scheduled_events.py": (),
    "clock.py": (),
    "net.py": (),
    "errors.py": (),
}

INSIDE: Dict[str, str] = {
    "pipeline/kubernetes/": "pipeline/",
}
"""Sub-packages that are part of a row rather than rows of their own: their files count as that
row's (the Kubernetes drain is the pipeline's, on every VM, under the pipeline's rules)."""

WHY: Dict[str, str] = {
    "entry.py": "`agent run` starts without click, its stop handlers installed first",
    "iac/": "reads only the PATCH body and the scheduled-events policy's model",
    "central/": "the central handler: Resource Graph and the Maintenance RP through fleet's and control's ARM code",
    "control/": "the Azure SDK lazily, inside the functions that talk to ARM; requests only for its proxy rules (azure-core's transport)",
    "vmss_terminate_sim/commands/": "`emulator`, `sandbox`, `demo`: registered by name in `cli.py`, never imported",
    "vmss_terminate_sim/emulator/": "standard library only: stands in for Azure in front of either side",
    "vmss_terminate_sim/demo_hook.py": "a hook script, run as a process",
    "vmss_terminate_sim/azurite.py": "Microsoft's Storage emulator: npm install into a cache, start on loopback (stdlib)",
    "agent/": "on every VM: never `azure`, the control plane or the simulation",
    "pipeline/": "source-free: never the agent (a source), `azure`, the control plane or the simulation",
}
"""A few words on the doc's table for the rows whose reason is not obvious."""


def allowed(row: str) -> List[str]:
    """The row's list with `SHARED` spelled out."""
    names: List[str] = []
    for name in LAYERS[row]:
        names.extend(SHARED_MODULES if name == SHARED else (name,))
    return names


# --- reading the code -------------------------------------------------------------------------


def _key(path: Path) -> str:
    """A file's or folder's name in the table: relative to the product package, or from the
    repository root for the simulation's."""
    if path == SIM or SIM in path.parents:
        return path.relative_to(ROOT).as_posix()
    return path.relative_to(PACKAGE).as_posix()


def _path(key: str) -> Path:
    """The inverse of `_key`."""
    return ROOT / key if key.startswith("vmss_terminate_sim/") else PACKAGE / key


def _files() -> List[Path]:
    return sorted([*PACKAGE.rglob("*.py"), *SIM.rglob("*.py")])


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _module_file(module: str) -> Optional[Path]:
    """The file of `vmss_terminate.x.y` or `vmss_terminate_sim.x.y` (a module or a package's
    __init__.py), None if no such module."""
    top, *parts = module.split(".")
    base = TOPS[top].joinpath(*parts)
    for candidate in (base.with_suffix(".py"), base / "__init__.py"):
        if parts and candidate.is_file():
            return candidate
    return TOPS[top] / "__init__.py" if not parts else None


def _imports(path: Path, module: str = "") -> Iterator[Tuple[int, str]]:
    """Every module an import statement in `path` imports, relative imports resolved against
    `module` (default: the module `path` is). `from p import name` is `p.name` when that is a
    module, else `p`."""
    package = (module or _module_name(path)).split(".")
    if path.name != "__init__.py":
        package.pop()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            base = package[:len(package) - node.level + 1] if node.level else []
            parent = ".".join(base + ([node.module] if node.module else []))
            for alias in node.names:
                child = f"{parent}.{alias.name}"
                is_module = child.split(".")[0] in TOPS and _module_file(child) is not None
                yield node.lineno, child if is_module else parent


def _part_of(path: Path) -> str:
    """The part a file is in: its package folder, or itself at a package root."""
    return _key(path) if path.parent in (PACKAGE, SIM) else _key(path.parent) + "/"


def _row_of(path: Path) -> str:
    """The row a file belongs to: its part, or the row that part is INSIDE."""
    part = _part_of(path)
    return INSIDE.get(part, part)


def _parts() -> List[str]:
    """Every part of the tree that needs a row (or an INSIDE entry): each package folder and each
    module at the root."""
    found = {_part_of(path) for path in _files()}
    found |= {_key(p) + "/" for top in (PACKAGE, SIM) for p in top.rglob("*")
              if p != SIM and (p / "__init__.py").is_file()}
    return sorted(found)


def _target(module: str) -> Optional[Tuple[str, str]]:
    """(row, file's name in the table) of an imported `vmss_terminate`/`vmss_terminate_sim` module,
    or (external name, "") for a third-party one; None for the standard library and `__future__`."""
    top = module.split(".")[0]
    if top in TOPS:
        file = _module_file(module)
        if file is None:
            raise AssertionError(f"import of {module}: no such module")
        return _row_of(file), _key(file)
    if top == "__future__" or top in getattr(sys, "stdlib_module_names", ()):
        return None
    if top in EXTERNAL or not hasattr(sys, "stdlib_module_names"):
        return (top, "") if top in EXTERNAL else None
    return top, ""


def _violations() -> List[str]:
    found = []
    for path in _files():
        row = _row_of(path)
        if row not in LAYERS:
            continue  # reported by test_every_package_and_root_module_has_a_row
        may = allowed(row)
        for lineno, module in _imports(path):
            target = _target(module)
            if target is None or target[0] == row:
                continue
            name, file = target
            if name in may or (file and file in may):
                continue
            where = f"{path.relative_to(ROOT)}:{lineno}"
            if name not in LAYERS and name not in EXTERNAL:
                found.append(f"{where} imports {module}: {name!r} is not a row of LAYERS nor in EXTERNAL "
                             "(tests/test_layers.py): say who may import it")
            else:
                found.append(f"{where} imports {module} ({name}), which LAYERS['{row}'] does not allow")
    return found


def _module_graph() -> Dict[str, Set[str]]:
    graph: Dict[str, Set[str]] = {}
    for path in _files():
        mine = _key(path)
        for _, module in _imports(path):
            if module.split(".")[0] in TOPS:
                file = _module_file(module)
                if file is not None and file != path:
                    graph.setdefault(mine, set()).add(_key(file))
    return graph


def _cycles(graph: Dict[str, Set[str]]) -> List[List[str]]:
    """Strongly connected groups of more than one node (Tarjan)."""
    index: Dict[str, int] = {}
    low: Dict[str, int] = {}
    stack: List[str] = []
    on_stack: Set[str] = set()
    found: List[List[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                item = stack.pop()
                on_stack.discard(item)
                group.append(item)
                if item == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


# --- the table in docs/architecture.md ---------------------------------------------------------

BEGIN = "<!-- layers: generated from LAYERS in tests/test_layers.py -->"
END = "<!-- layers: end -->"


def render_table() -> str:
    """LAYERS as the Markdown table docs/architecture.md prints between BEGIN and END."""
    lines = [BEGIN, "", "| part (top down) | may import, besides itself and the standard library | why |",
             "|---|---|---|"]
    for row, names in LAYERS.items():
        shown = [EXTERNAL[name] if name in EXTERNAL else ("the shared modules" if name == SHARED else f"`{name}`")
                 for name in names] or ["nothing"]
        lines.append(f"| `{row}` | {', '.join(shown)} | {WHY.get(row, '')} |")
    shared = ", ".join(f"`{name}`" for name in SHARED_MODULES)
    lines += ["", f"The shared modules: {shared}."]
    lines += [f"`{part}` is part of `{row}`'s row." for part, row in INSIDE.items()]
    lines += ["", END]
    return "\n".join(lines)


def _doc_table(text: str) -> Optional[str]:
    match = re.search(re.escape(BEGIN) + r".*?" + re.escape(END), text, re.S)
    return match.group(0) if match else None


def write_doc() -> None:
    text = DOC.read_text(encoding="utf-8")
    current = _doc_table(text)
    assert current is not None, f"{DOC} has no {BEGIN} ... {END} block"
    DOC.write_text(text.replace(current, render_table()), encoding="utf-8")


# --- the tests ---------------------------------------------------------------------------------


def test_every_package_and_root_module_has_a_row() -> None:
    missing = [part for part in _parts() if part not in LAYERS and part not in INSIDE]
    assert not missing, (f"no row in LAYERS (tests/test_layers.py) for {', '.join(missing)}: add one saying what "
                         f"it may import (or, for a sub-package that is part of its parent, an INSIDE entry), "
                         f"then run `{PROGRAM}`")
    stale = [row for row in [*LAYERS, *INSIDE] if row not in _parts()]
    assert not stale, f"LAYERS/INSIDE (tests/test_layers.py) name what does not exist: {', '.join(stale)}"
    assert all(row in LAYERS for row in INSIDE.values()), "INSIDE must name rows of LAYERS"


def test_rows_name_only_rows_below_them() -> None:
    """The table is the layering: no row allows one above it or itself (no upward arrow, no circle)."""
    order = list(LAYERS)
    wrong = []
    for position, row in enumerate(order):
        for name in allowed(row):
            target = name if name in LAYERS else (_row_of(_path(name)) if _path(name).is_file() else None)
            if name in EXTERNAL:
                continue
            if target is None or target not in LAYERS:
                wrong.append(f"{row} names {name!r}, which is no row, module of a row or EXTERNAL name")
            elif order.index(target) <= position:
                wrong.append(f"{row} names {name!r}, which is not below it")
    assert not wrong, "LAYERS (tests/test_layers.py): " + "; ".join(wrong)


def test_every_import_is_allowed_by_the_table() -> None:
    found = _violations()
    assert not found, "imports the layer table LAYERS (tests/test_layers.py) refuses:\n" + "\n".join(found)


def test_no_modules_import_each_other() -> None:
    """Not even inside one package, lazily, or for type checking only: a narrow protocol instead."""
    circles = _cycles(_module_graph())
    assert not circles, "modules that import each other: " + "; ".join(" <-> ".join(c) for c in circles)


def test_the_architecture_page_prints_the_table() -> None:
    shown = _doc_table(DOC.read_text(encoding="utf-8"))
    assert shown == render_table(), f"docs/architecture.md's layer table differs from LAYERS: run `{PROGRAM}`"


def test_the_guard_can_fail(tmp_path: Path) -> None:
    """An import inside a function and a relative one are both seen, a forbidden one is refused,
    a circle is found, and a folder without a row is named."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from ..control import api\n    import azure.identity\n", encoding="utf-8")
    names = [name for _, name in _imports(probe, module="vmss_terminate.agent.probe")]
    assert names == ["vmss_terminate.control.api", "azure.identity"]
    assert [n for n in names if _target(n) and _target(n)[0] not in allowed("agent/")] == names  # type: ignore[index]
    assert _cycles({"a.py": {"b.py"}, "b.py": {"c.py"}, "c.py": {"a.py"}, "d.py": {"a.py"}}) == [
        ["a.py", "b.py", "c.py"]]
    assert "iac/render.py" not in allowed("iac/") and "control/body.py" in allowed("iac/")


# --- at run time --------------------------------------------------------------------------------


def _reach(row: str) -> Set[str]:
    """Every row (and external name) `row` may load, directly or through the rows it may import."""
    seen: Set[str] = set()
    todo = [row]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        for name in allowed(current) if current in LAYERS else ():
            todo.append(_row_of(_path(name)) if name.endswith(".py") and "/" in name.removeprefix(
                "vmss_terminate_sim/") else name)
    return seen


def _outside(loaded: List[str], row: str) -> List[str]:
    """Loaded modules (`vmss_terminate...`, `azure...`) that `row` may not load."""
    reach = _reach(row)
    out = []
    for module in loaded:
        target = _target(module)
        if target is not None and target[0] not in reach:
            out.append(module)
    return out


def _loaded_after(code: str) -> List[str]:
    """Modules of interest loaded by a fresh interpreter after running `code`."""
    script = (
        "import sys\n"
        f"{code}\n"
        "print('\\n' + __import__('json').dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('azure', 'vmss_terminate', 'vmss_terminate_sim'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return list(json.loads(result.stdout.strip().splitlines()[-1]))


def test_importing_the_agent_loads_no_control_emulator_or_azure() -> None:
    loaded = _loaded_after("import vmss_terminate.agent")
    assert "vmss_terminate.agent.agent" in loaded  # the probe saw the import happen
    assert _outside(loaded, "agent/") == []
    assert _outside(["vmss_terminate.control.api", "azure.core"], "agent/") == ["vmss_terminate.control.api",
                                                                                 "azure.core"]


def test_the_package_root_is_cheap() -> None:
    """The agent imports the root: it must not pull in any sub-package or the Azure SDK."""
    loaded = _loaded_after("import vmss_terminate")
    assert set(loaded) <= {"vmss_terminate", "vmss_terminate.errors"}


def _cli(argv: List[str]) -> str:
    """Code running the console script (`vmss_terminate.entry.main`) with `argv`, expecting exit 0."""
    return (
        "from vmss_terminate.entry import main\n"
        "try:\n"
        f"    main({argv!r})\n"
        "except SystemExit as exc:\n"
        "    assert not exc.code, exc.code\n"
    )


def test_agent_cli_paths_load_no_azure() -> None:
    """The console script against an IMDS emulator: `agent run` (what every VM runs) loads the agent
    and nothing above it; `agent events` (through the click CLI) no Azure SDK either."""
    from vmss_terminate_sim.emulator.imds import start_imds

    with start_imds(vm_names=["vm0"]) as imds:
        where = ["--imds-url", imds.urls[0], "--vm-name", "vm0"]
        run = _loaded_after(_cli(["agent", "run", "--once", "--state-file", ":memory:", *where]))
        events = _loaded_after(_cli(["agent", "events", "-o", "json", *where]))
    assert "vmss_terminate.agent.agent" in run and "vmss_terminate.agent.ops" in events
    assert _outside([m for m in run if not m.startswith("vmss_terminate.entry")], "agent/") == []
    assert [m for m in events if m.startswith("azure")] == []


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write_doc()
    else:
        print(render_table())
