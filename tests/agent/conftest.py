"""Fixtures for agent tests: a real IMDS emulator on loopback, and helpers to run the agent."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional

import pytest
from clifork import run_forked
from helpers import poll_until as wait_until  # noqa: F401  (re-exported for the agent tests)

from vmss_terminate.agent import Agent, AgentConfig, Decision
from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.server import EmulatorServer

REPO = Path(__file__).resolve().parents[2]
VM = "myvmss_3"


@dataclass
class Imds:
    group: PlacementGroup
    app: ImdsEmulator
    server: EmulatorServer
    url: str = ""  # the server's base URL, filled in by the fixture

    def approved_ids(self) -> List[str]:
        return [a.event_id for a in self.group.approvals if a.accepted]


@pytest.fixture(scope="session")
def _imds_server() -> Iterator[EmulatorServer]:
    # One server for the session (stopping one costs 0.5 s); each test gets a fresh app on it.
    group = PlacementGroup(auto_start=False)
    with EmulatorServer(ImdsEmulator(group, vm_name=VM, rate_limit=None)) as server:
        yield server


@pytest.fixture
def imds(_imds_server: EmulatorServer) -> Iterator[Imds]:
    """One VM (myvmss_3) of a placement group; approvals only record (the test decides starts)."""
    group = PlacementGroup(auto_start=False)
    app = ImdsEmulator(group, vm_name=VM, vmss_name="myvmss", rate_limit=None)
    _imds_server.reset(app)
    yield Imds(group, app, _imds_server, _imds_server.url)
    _imds_server.reset()  # ends injected delays: nothing of this test lands in the next one


@dataclass
class Recorder:
    """Collects decisions; `wait_for(kind)` blocks (bounded) until one arrives."""

    items: List[Decision] = field(default_factory=list)
    cond: threading.Condition = field(default_factory=threading.Condition)

    def __call__(self, decision: Decision) -> None:
        with self.cond:
            self.items.append(decision)
            self.cond.notify_all()

    def kinds(self, event_id: Optional[str] = None) -> List[str]:
        with self.cond:
            return [d.kind for d in self.items if event_id is None or d.event_id == event_id]

    def wait_for(self, predicate: Callable[[List[Decision]], bool], timeout: float = 10.0) -> bool:
        with self.cond:
            return self.cond.wait_for(lambda: predicate(list(self.items)), timeout)

    def wait_kind(self, kind: str, event_id: Optional[str] = None, timeout: float = 10.0) -> bool:
        return self.wait_for(lambda items: any(d.kind == kind and (event_id is None or d.event_id == event_id)
                                               for d in items), timeout)


def make_agent(url: str, clock: Any = None, transport: Any = None, **overrides: Any) -> Agent:
    """An agent for tests; `transport` (e.g. an InProcessTransport) carries its IMDS requests instead of sockets."""
    options = dict(imds_url=url, state_file=":memory:", poll_interval=0.05, max_requests_per_second=200,
                   request_timeout=2.0, first_call_timeout=2.0, kill_grace=1.0, stop_grace=0.0)
    options.update(overrides)
    return Agent(AgentConfig(**options), transport=transport, **({"clock": clock} if clock is not None else {}))


class Running:
    """An agent looping in a thread; stops (bounded join) on exit."""

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.stop = threading.Event()
        self.decisions = Recorder()
        agent.subscribe(self.decisions)
        self.thread = threading.Thread(target=agent.run, args=(self.stop,), daemon=True)

    def __enter__(self) -> "Running":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.stop.set()
        self.thread.join(15)
        assert not self.thread.is_alive(), "agent did not stop"


def agent_cli(*args: str, env: Optional[dict] = None, **kwargs: Any) -> subprocess.Popen:
    """Start `python -m vmss_terminate agent ...` as a subprocess (no proxies, no ambient IMDS URL)."""
    full_env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    full_env.pop("VMSS_TERMINATE_IMDS_URL", None)
    full_env.update(env or {})
    return subprocess.Popen([sys.executable, "-m", "vmss_terminate", "agent", *args], env=full_env, cwd=str(REPO),
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **kwargs)


def run_cli(*args: str, env: Optional[dict] = None, timeout: float = 30) -> subprocess.CompletedProcess:
    """`python -m vmss_terminate agent ...` to completion, as agent_cli's environment says: a process
    of its own, forked from a warm interpreter (tests/clifork.py) rather than started cold."""
    full_env = {k: v for k, v in os.environ.items() if "proxy" not in k.lower()}
    full_env.pop("VMSS_TERMINATE_IMDS_URL", None)
    full_env.update(env or {})
    return run_forked(["agent", *args], full_env, str(REPO), timeout=timeout)
