"""One real Azurite per test run, shared by the pytest-xdist workers.

The first worker that needs it installs Azurite when missing (npm registry, cached outside the
repository: `vmss_terminate_sim.azurite`) and starts it on loopback ports the OS chose; the others
read its endpoints from a state file under the run's shared temporary root. A reference count under
a file lock says who is still using it; the last worker to leave stops it.

Only when npm itself is missing do the tests that need it skip, with a reason naming the install
command; under CI (CI=true) that is a failure.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator

import pytest

from vmss_terminate_sim import azurite

STATE = "azurite-state.json"
LOCK = "azurite.lock"

# A watchdog process ends Azurite when the test run that started it is gone without its teardown
# (a worker killed by a timeout, a run interrupted): no Azurite outlives its run.
WATCHDOG = """
import os, signal, sys, time
owner, server = int(sys.argv[1]), int(sys.argv[2])
def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
while alive(server):
    if not alive(owner):
        try:
            os.killpg(server, signal.SIGTERM)
        except OSError:
            pass
        break
    time.sleep(1)
"""


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def _lock(root: Path) -> Iterator[None]:
    import fcntl

    with open(root / LOCK, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _read(path: Path) -> Dict[str, Any]:
    try:
        data: Dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
        return data
    except (OSError, ValueError):
        return {}


def _unavailable(reason: str) -> None:
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(f"{reason} (CI=true: the Azurite tests must run in CI)", pytrace=False)
    pytest.skip(reason)


def ensure_installed() -> None:
    if azurite.is_installed():
        return
    if azurite.npm() is None:
        _unavailable(azurite.missing_npm_message())
    try:
        azurite.install()
    except OSError as exc:
        pytest.fail(f"could not install Azurite: {exc}", pytrace=False)


@contextlib.contextmanager
def shared_azurite(root: Path) -> Iterator[azurite.Endpoints]:
    """Join (or start) the run's Azurite; leave it on exit, stopping it when no one else uses it."""
    ensure_installed()
    state_path = root / STATE
    with _lock(root):
        state = _read(state_path)
        if not state or not _pid_alive(int(state.get("pid", 0))):
            server = azurite.start(root / "azurite-work")
            state = {"pid": server.pid, "endpoints": server.endpoints.to_json(), "users": 0}
            owner = os.getppid() if os.environ.get("PYTEST_XDIST_WORKER") else os.getpid()  # the run's controller
            subprocess.Popen([sys.executable, "-c", WATCHDOG, str(owner), str(server.pid)], start_new_session=True,
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        state["users"] = int(state["users"]) + 1
        state_path.write_text(json.dumps(state), encoding="utf-8")
    try:
        yield azurite.Endpoints.from_json(state["endpoints"])
    finally:
        with _lock(root):
            state = _read(state_path)
            state["users"] = int(state.get("users", 1)) - 1
            if state["users"] <= 0:
                azurite.stop_pid(int(state["pid"]))
                state_path.unlink(missing_ok=True)
            else:
                state_path.write_text(json.dumps(state), encoding="utf-8")
