"""Run `python -m vmss_terminate ...` as on the lean install: an import hook makes `azure`, `msal`
and `cryptography` unimportable (as if `[control]` were not installed), then runs the CLI.

    python tests/no_azure.py agent run --once ...

Used by tests/test_cli_lazy.py; `benchmarks/footprint.py` checks the same in a real fresh venv.
"""

from __future__ import annotations

import runpy
import sys
from typing import Any, Optional

BLOCKED = ("azure", "msal", "cryptography")


class _Blocker:
    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Optional[Any]:
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: lean install)", name=name)
        return None


if __name__ == "__main__":
    sys.meta_path.insert(0, _Blocker())
    sys.argv = ["vmss-terminate"] + sys.argv[1:]
    runpy.run_module("vmss_terminate", run_name="__main__", alter_sys=True)
