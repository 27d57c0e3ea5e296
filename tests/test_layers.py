"""Layer guards: the agent never imports the control plane, the emulators or the Azure SDK, and
the emulators and the control plane never import each other or the agent.

Checked twice: statically (every import statement in the package's files, including imports
inside functions, which is where lazy imports hide) and at run time (what a fresh interpreter has
loaded after importing the agent, or after running the agent's CLI against an IMDS emulator).
"""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

import pytest

from vmss_terminate.emulator.imds import start_imds

PACKAGE = Path(__file__).resolve().parent.parent / "vmss_terminate"

# package (under vmss_terminate) -> module prefixes its files must never import
FORBIDDEN: Dict[str, Tuple[str, ...]] = {
    "agent": ("azure", "vmss_terminate.control", "vmss_terminate.emulator", "vmss_terminate.sandbox",
              "vmss_terminate.fleet", "vmss_terminate.commands", "vmss_terminate.cli"),
    "emulator": ("vmss_terminate.agent", "vmss_terminate.control", "vmss_terminate.sandbox",
                 "vmss_terminate.fleet", "vmss_terminate.commands", "vmss_terminate.cli"),
    "control": ("vmss_terminate.agent", "vmss_terminate.emulator", "vmss_terminate.sandbox",
                "vmss_terminate.commands", "vmss_terminate.cli"),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, module: str = "") -> Iterator[Tuple[int, str]]:
    """Every module an import statement in `path` names, relative imports resolved against
    `module` (default: the module `path` is)."""
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
            yield node.lineno, parent
            for alias in node.names:  # `from vmss_terminate import control` names a module too
                yield node.lineno, f"{parent}.{alias.name}"


def _matches(module: str, prefixes: Tuple[str, ...]) -> bool:
    return any(module == prefix or module.startswith(prefix + ".") for prefix in prefixes)


def _violations(layer: str) -> List[str]:
    found = []
    for path in sorted((PACKAGE / layer).rglob("*.py")):
        for lineno, module in _imports(path):
            if _matches(module, FORBIDDEN[layer]):
                found.append(f"{path.relative_to(PACKAGE.parent)}:{lineno} imports {module}")
    return found


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_stay_inside_their_bounds(layer: str) -> None:
    assert (PACKAGE / layer).is_dir()
    assert _violations(layer) == []


def test_import_scanner_sees_lazy_and_relative_imports(tmp_path: Path) -> None:
    """The guard itself can fail: an import inside a function and a relative one are both seen."""
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from ..control import api\n    import azure.identity\n", encoding="utf-8")
    names = [name for _, name in _imports(probe, module="vmss_terminate.agent.probe")]
    assert "vmss_terminate.control.api" in names and "azure.identity" in names
    assert [name for name in names if _matches(name, FORBIDDEN["agent"])]


def _loaded_after(code: str) -> List[str]:
    """Modules of interest loaded by a fresh interpreter after running `code`."""
    script = (
        "import sys\n"
        f"{code}\n"
        "print('\\n' + __import__('json').dumps(sorted(m for m in sys.modules "
        "if m.split('.')[0] in ('azure', 'vmss_terminate'))))\n"
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.strip().splitlines()[-1])


def test_importing_the_agent_loads_no_control_emulator_or_azure() -> None:
    loaded = _loaded_after("import vmss_terminate.agent")
    assert "vmss_terminate.agent.agent" in loaded  # the probe saw the import happen
    assert [m for m in loaded if _matches(m, FORBIDDEN["agent"])] == []


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
    with start_imds(vm_names=["vm0"]) as imds:
        where = ["--imds-url", imds.urls[0], "--vm-name", "vm0"]
        run = _loaded_after(_cli(["agent", "run", "--once", "--state-file", ":memory:", *where]))
        events = _loaded_after(_cli(["agent", "events", "-o", "json", *where]))
    assert "vmss_terminate.agent.agent" in run and "vmss_terminate.agent.ops" in events
    assert [m for m in run if _matches(m, FORBIDDEN["agent"])] == []
    assert [m for m in events if m.startswith("azure")] == []
