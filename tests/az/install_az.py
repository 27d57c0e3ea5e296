#!/usr/bin/env python3
"""Install the real Azure CLI into its own virtual environment, outside the repository, for the
compatibility suite (tests/az, `pytest -m az`).

    python3 tests/az/install_az.py            # prints the path of `az`; fast when already installed

Why its own venv: azure-cli pins its own azure-* packages; installed next to ours it would change
what the product and its tests run against. The venv lives in
${VMSS_TERMINATE_AZ_VENV:-~/.cache/vmss-terminate/az-venv} so CI runs (which rebuild the project's
.venv) reuse it; a marker file records the installed version, and a different
VMSS_TERMINATE_AZ_VERSION reinstalls. Stdlib only: it runs before anything else is installed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
import venv
from pathlib import Path

AZ_VERSION = "2.91.0"  # the version issue 12 was reproduced with
_MARKER = ".vmss-terminate-az-version"


def az_venv() -> Path:
    default = Path.home() / ".cache" / "vmss-terminate" / "az-venv"
    return Path(os.environ.get("VMSS_TERMINATE_AZ_VENV") or default).expanduser()


def wanted_version() -> str:
    return os.environ.get("VMSS_TERMINATE_AZ_VERSION") or AZ_VERSION


def az_executable(root: Path) -> Path:
    return root / ("Scripts/az.bat" if os.name == "nt" else "bin/az")


def installed_version(root: Path) -> str:
    """The version this script installed at `root`, or "" when there is none (or it is broken)."""
    marker = root / _MARKER
    if not marker.is_file() or not az_executable(root).is_file():
        return ""
    return marker.read_text(encoding="utf-8").strip()


def install(root: Path, version: str) -> None:
    if root.exists():
        shutil.rmtree(root)
    root.parent.mkdir(parents=True, exist_ok=True)
    venv.EnvBuilder(with_pip=True).create(root)
    python = root / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    log = root / "pip-install.log"  # pip's chatter stays out of CI output unless it fails
    with open(log, "w", encoding="utf-8") as out:
        done = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                               f"azure-cli=={version}"], stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log.read_text(encoding="utf-8", errors="replace").splitlines()[-15:]
        raise OSError(f"pip exited {done.returncode}; last lines of {log}:\n" + "\n".join(tail))
    (root / _MARKER).write_text(version + "\n", encoding="utf-8")


def main() -> int:
    root, version = az_venv(), wanted_version()
    started = time.monotonic()
    if installed_version(root) == version:
        state = "cached"
    else:
        print(f"installing azure-cli {version} into {root} (once; cached for later runs)", file=sys.stderr)
        try:
            install(root, version)
        except OSError as exc:
            print(f"error: could not install azure-cli {version} into {root}: {exc}", file=sys.stderr)
            return 1
        state = "installed"
    print(f"azure-cli {version} {state} in {time.monotonic() - started:.1f} s", file=sys.stderr)
    print(az_executable(root))
    return 0


if __name__ == "__main__":
    sys.exit(main())
