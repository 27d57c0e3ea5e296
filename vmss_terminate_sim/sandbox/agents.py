"""One real agent per sandbox instance, each in a thread, pointed at its own IMDS.

The agents run unchanged (`vmss_terminate.agent.Agent`), on the sandbox clock, with state kept in
memory. Every decision goes to the sandbox timeline (source "agent"). When an instance's deletion
starts, its agent is stopped: the VM is shutting down.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import threading
from typing import Dict, Iterable, List, Optional, Sequence

from vmss_terminate.agent import Agent, AgentConfig, Decision
from vmss_terminate.clock import wait_until
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.journal import MEMORY
from vmss_terminate.pipeline.kubernetes.drain import DRAIN_STEP
from vmss_terminate_sim.sandbox.environment import Sandbox
from vmss_terminate_sim.sandbox.timeline import Entry

POLL_REAL_SECONDS = 0.5
"""Real seconds between an agent's polls. Two GETs a second leave room, under the agent's own 4/s limiter
(IMDS allows 5/s), for the GET + POST of an approval, which would otherwise queue behind polls."""


def demo_hook_command(python: Optional[str] = None) -> str:
    """`--hook` command line of the demo drain hook (`python -m vmss_terminate_sim.demo_hook`)."""
    argv = [python or sys.executable, "-m", "vmss_terminate_sim.demo_hook"]
    if os.name == "nt":
        return subprocess.list2cmdline(argv)
    return " ".join(shlex.quote(a) for a in argv)


def _summary(decision: Decision) -> str:
    """A short line for the timeline; the agent's full message stays in the entry's data."""
    event = (decision.event_id or "")[:8]
    if decision.kind in (D.HOOK_STARTED, D.HOOK_FINISHED):
        hook = decision.view(D.HookData)
        step: Optional[str] = hook.get("hook")
        if step == DRAIN_STEP:
            return (f"Kubernetes node drain {'started' if decision.kind == D.HOOK_STARTED else 'finished'} "
                    f"for event {event}")
        if decision.kind == D.HOOK_STARTED:
            return f"drain hook started for event {event}"
        exit_code: Optional[int] = hook.get("exit_code")
        return f"drain hook finished (exit {exit_code})"
    if decision.kind == D.APPROVAL_SENT:
        return f"approved its own Terminate event {event} (POST StartRequests)"
    return decision.message


class SandboxAgents:
    """Agents for (some of) the sandbox's instances. `start()`, then `stop()` (or use `with`)."""

    def __init__(self, sandbox: Sandbox, hooks: Sequence[str] = (), vm_names: Optional[Iterable[str]] = None,
                 poll_real_seconds: float = POLL_REAL_SECONDS, **config: object) -> None:
        self.sandbox = sandbox
        urls = sandbox.imds_urls()
        names = list(vm_names) if vm_names is not None else list(urls)
        missing = [n for n in names if n not in urls]
        if missing:
            raise ValueError(f"no such sandbox instance(s): {', '.join(missing)}")
        poll = poll_real_seconds * sandbox.speed  # agents wait on the sandbox clock
        self.agents: Dict[str, Agent] = {}
        for name in names:
            agent_config = AgentConfig(imds_url=urls[name], hooks=tuple(hooks), poll_interval=poll,
                                       state_file=MEMORY, **config)  # type: ignore[arg-type]
            agent = Agent(agent_config, clock=sandbox.clock)
            agent.subscribe(self._recorder(name))
            self.agents[name] = agent
        self._stops: Dict[str, threading.Event] = {n: threading.Event() for n in names}
        self._threads: List[threading.Thread] = []
        self._known = threading.Condition()
        self._named: Dict[str, str] = {}
        sandbox.timeline.subscribe(self._on_entry)

    def _recorder(self, name: str):  # type: ignore[no-untyped-def]
        def record(decision: Decision) -> None:
            if decision.kind == D.VM_NAME:
                with self._known:
                    self._named[name] = decision.vm_name or ""
                    self._known.notify_all()
            data = dict(decision.data)
            data["event_id"] = decision.event_id
            data["agent_message"] = decision.message
            self.sandbox.timeline.record("agent", decision.kind, decision.vm_name or name,
                                         _summary(decision), **data)
        return record

    def _on_entry(self, entry: Entry) -> None:
        if entry.source == "sandbox" and entry.kind == "deletion_started" and entry.vm in self._stops:
            self._stops[entry.vm].set()

    def start(self) -> "SandboxAgents":
        for name, agent in self.agents.items():
            thread = threading.Thread(target=agent.run, args=(self._stops[name],), daemon=True,
                                      name=f"agent:{name}")
            thread.start()
            self._threads.append(thread)
        return self

    def wait_ready(self, wait_seconds: float) -> bool:
        """Every agent has learnt its VM name from its IMDS (bounded, real seconds)."""
        return wait_until(self._known, lambda: len(self._named) >= len(self.agents), wait_seconds)

    def stop(self, wait_seconds: float = 10.0) -> None:
        for stop in self._stops.values():
            stop.set()
        for thread in self._threads:
            thread.join(wait_seconds)
        self._threads.clear()

    def __enter__(self) -> "SandboxAgents":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
