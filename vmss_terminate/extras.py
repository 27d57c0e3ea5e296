"""Optional parts of the install, and the one error for a missing one.

`pip install vmss-terminate` is the lean in-VM agent (requests + click). The control plane, fleet
commands, ARM emulator, sandbox and demo need the Azure SDK from `pip install 'vmss-terminate[control]'`.
Checked with `importlib.util.find_spec`, so asking costs no Azure SDK import.
"""

from __future__ import annotations

import importlib.util
from typing import Dict, List, Set, Tuple

from vmss_terminate.errors import UsageError

CONTROL = "control"

# extra -> the modules it must make importable (one per distribution of the extra)
MODULES: Dict[str, Tuple[str, ...]] = {
    CONTROL: ("azure.core", "azure.identity", "azure.mgmt.compute", "azure.mgmt.resourcegraph", "azure.storage.queue",
              "azure.storage.blob"),
}


_INSTALLED: Set[str] = set()
"""Extras already found complete in this process: an installed module does not go away while the
process runs, and `find_spec` scans sys.path (a stat per entry, under the import lock) -- a fleet
rollout builds a client per scale set, and asked six times per set (issue 29's rollout CPU)."""


class MissingExtraError(UsageError):
    """A command or API that needs an extra ran on an install without it: exit 2, one line."""


def install_command(extra: str) -> str:
    return f"pip install 'vmss-terminate[{extra}]'"


def missing_modules(extra: str) -> List[str]:
    """The modules of `extra` that cannot be imported here (empty when the extra is installed)."""
    return [name for name in MODULES[extra] if not _importable(name)]


def require(extra: str, what: str) -> None:
    """Raise MissingExtraError naming the install command unless `extra` is installed."""
    if extra in _INSTALLED:
        return
    missing = missing_modules(extra)
    if missing:
        raise MissingExtraError(
            f"{what} needs the [{extra}] extra (missing {', '.join(missing)}): {install_command(extra)}")
    _INSTALLED.add(extra)


def _importable(name: str) -> bool:
    try:
        return importlib.util.find_spec(name) is not None
    except (ImportError, ValueError):  # a parent package is missing (or blocked)
        return False
