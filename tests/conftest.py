"""Suite-wide guards: tests talk only to loopback, and no ambient Azure or proxy settings leak in."""

from __future__ import annotations

import os
import signal
import socket
import sys
from pathlib import Path
from typing import Any, Iterator, List

import pytest
from hypothesis import HealthCheck, settings

from vmss_terminate.net import is_loopback_host

_AMBIENT = (
    "AZURE_CLIENT_ID", "AZURE_CLIENT_SECRET", "AZURE_TENANT_ID", "AZURE_SUBSCRIPTION_ID",
    "AZURE_USERNAME", "AZURE_PASSWORD", "AZURE_FEDERATED_TOKEN_FILE", "AZURE_AUTHORITY_HOST",
    "IDENTITY_ENDPOINT", "IDENTITY_HEADER", "MSI_ENDPOINT", "MSI_SECRET", "IMDS_ENDPOINT",
    "VMSS_TERMINATE_IMDS_URL", "VMSS_TERMINATE_ARM_ENDPOINT",
    "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "NO_PROXY", "no_proxy",
)

_real_connect = socket.socket.connect

# Hypothesis times each example (200 ms by default) and fails a property whose example ran slow once
# and fast when replayed ("Unreliable test timings"), and its too_slow health check fails slow data
# generation: on a loaded machine both measure the machine, not the property. No example is timed
# in this suite (speed is measured by benchmarks/, issue 28); a test's own @settings still applies.
settings.register_profile("vmss-terminate", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("vmss-terminate")

# Bytecode is cached even where PYTHONDONTWRITEBYTECODE is set (it is in some shells and CI images):
# without it every Python the suite starts -- each pytest-xdist worker's collection, every
# `python -m vmss_terminate` subprocess, hook and replica -- compiles the package (and rewrites the
# tests) from source again, ~0.4 s of CPU per process and a third of the suite's CPU on 2 cores. The
# caches go to one directory outside the checkout (PYTHONPYCACHEPREFIX; an explicit one is kept),
# so the tree stays clean; set before the workers start, they and every subprocess inherit it.
if sys.dont_write_bytecode or os.environ.get("PYTHONDONTWRITEBYTECODE"):
    _prefix = os.environ.get("PYTHONPYCACHEPREFIX") or str(Path.home() / ".cache" / "vmss-terminate" / "pycache")
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    os.environ["PYTHONPYCACHEPREFIX"] = _prefix
    sys.dont_write_bytecode = False
    sys.pycache_prefix = _prefix


# Tests stop foreground commands with Ctrl-C (SIGINT). A CI runner that starts the suite as a
# background job without job control hands it SIGINT *ignored*, which every child inherits, and a
# Python started that way never turns Ctrl-C into KeyboardInterrupt. Handling it here resets it to
# the default for the children (exec resets handled signals), whatever launched the suite.
if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def _is_loopback(address: Any) -> bool:
    if not isinstance(address, tuple):
        return True  # AF_UNIX paths
    return is_loopback_host(str(address[0]))


def _guarded_connect(self: socket.socket, address: Any) -> Any:
    if not _is_loopback(address):
        raise ConnectionRefusedError(f"test network guard: only loopback is allowed, not {address!r}")
    return _real_connect(self, address)


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: List[pytest.Item]) -> None:
    """Tests marked `slow` start first, spread over the workers: pytest-xdist's worksteal scheduler
    hands worker i the i-th contiguous share of the collection (then idle workers steal from the
    tail of the longest queue), so each share begins with its part of the slow tests instead of one
    worker running them all, or one of them ending the run alone. Otherwise the order is kept."""
    workers = max(1, int(getattr(config, "workerinput", {}).get("workercount", 1)))
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    rest = [item for item in items if item.get_closest_marker("slow") is None]
    ordered: List[pytest.Item] = []
    for worker in range(workers):
        share = (len(items) - len(ordered)) // (workers - worker)  # the scheduler's own split
        first = slow[worker::workers]
        ordered += first + rest[:max(0, share - len(first))]
        del rest[:max(0, share - len(first))]
    items[:] = ordered + rest


@pytest.fixture(autouse=True)
def _loopback_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(socket.socket, "connect", _guarded_connect)
    for name in _AMBIENT:
        monkeypatch.delenv(name, raising=False)


def _utf8(text: str) -> str:
    return text.encode("utf-8", "backslashreplace").decode("utf-8")


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: Any) -> Iterator[None]:
    """A failure report must reach the user: pytest-xdist sends reports between processes as UTF-8,
    and a lone surrogate (tests here feed such data on purpose) in a message or captured output
    would crash the worker instead. Such text is escaped (`\\ud800`); other reports are untouched."""
    outcome: Any = yield
    report = outcome.get_result()
    texts = [str(report.longrepr or "")] + [content for _, content in report.sections]
    try:
        for text in texts:
            text.encode("utf-8")
    except UnicodeEncodeError:
        report.longrepr = _utf8(str(report.longrepr or "")) or None
        report.sections = [(_utf8(title), _utf8(content)) for title, content in report.sections]


@pytest.fixture
def no_sockets(monkeypatch: pytest.MonkeyPatch) -> None:
    """The test opens no connection at all (an in-process transport carries its requests)."""
    def refuse(self: socket.socket, address: Any) -> Any:
        raise AssertionError(f"a connection to {address!r} was opened; this test must not use the network")

    monkeypatch.setattr(socket.socket, "connect", refuse)


@pytest.fixture(scope="session")
def shared_arm() -> Iterator[Any]:
    """One ARM + token server pair for the session (stopping a server costs ~0.5 s); packages serve
    each test's own state on it with `helpers.serve_arm_state`."""
    from vmss_terminate_sim.emulator.arm.app import ArmState, start_arm

    servers = start_arm(ArmState())
    try:
        yield servers
    finally:
        servers.stop()


@pytest.fixture(scope="session")
def azurite_endpoints(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Iterator[Any]:
    """The run's one real Azurite (tests/azurite_helpers.py): installed from the npm registry into
    its cache when missing, started once and shared by the pytest-xdist workers."""
    from azurite_helpers import shared_azurite

    base = tmp_path_factory.getbasetemp()
    root = base if worker_id == "master" else base.parent  # the run's root, shared by the workers
    with shared_azurite(root) as endpoints:
        yield endpoints
