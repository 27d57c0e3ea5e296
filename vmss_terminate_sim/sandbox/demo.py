"""`vmss-terminate demo`: the whole story on local emulators, with the production code paths.

1. a sandbox scale set (Manual upgrade policy) without terminate notifications;
2. the real control plane (`vmss_terminate.control.enable`, Azure SDK, a managed-identity token
   from the sandbox's token endpoint) enables the timeout and upgrades every instance;
3. one real agent per instance, each polling its own IMDS, with a real command hook;
4. a scale-in (PATCH sku.capacity through the SDK);
5. each removed instance's agent drains and approves its own event; the sandbox deletes them by
   Azure's rules. The demo fails (exit 1) unless every removed instance was deleted after its own
   agent drained and approved it, within the deadline, and nobody approved a foreign event.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

from vmss_terminate.clock import ScaledClock
from vmss_terminate.errors import InvalidValue
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.process import check_program, split_command
from vmss_terminate.timeout import parse_timeout, to_iso
from vmss_terminate_sim.emulator.kube import EvictionRecord
from vmss_terminate_sim.sandbox.agents import SandboxAgents, demo_hook_command
from vmss_terminate_sim.sandbox.environment import Sandbox, SandboxConfig
from vmss_terminate_sim.sandbox.kubernetes import SandboxCluster
from vmss_terminate_sim.sandbox.outcome import Outcome, failure_of
from vmss_terminate_sim.sandbox.timeline import HEADER as TIMELINE_HEADER
from vmss_terminate_sim.sandbox.timeline import Entry, Timeline, attempt_of

AGENT_KINDS_SHOWN = {
    "hook_started", "hook_finished", "hook_failed", "approval_sent", "approval_failed",
    "approval_withheld", "shared_not_approved",
    # --kubernetes (a refusal by the PodDisruptionBudget is shown once per pod; the JSON has every retry)
    "kube_node_not_found", "kube_cordoned", "kube_evicted", "kube_eviction_refused", "kube_eviction_failed",
    "kube_drained", "kube_not_drained", "kube_uncordoned",
}
MIN_REAL_NOTICE_S = 5.0
"""Real seconds the NotBefore timeout must last for every agent to poll, drain and approve on a busy
machine (measured: 1.25 s passes, 0.5 s fails on 2 shared cores), so `speed` <= timeout / this."""
BASE_DEADLINE_S = 30.0
"""Real seconds for what does not scale with the clock: start-up, enable + upgrade, agents' first calls."""
DELETE_SANDBOX_S = 30.0  # SandboxConfig.delete_duration: an approved deletion takes this long (sandbox s)


def max_speed(timeout_minutes: int) -> float:
    """The fastest clock at which the timeout still lasts MIN_REAL_NOTICE_S real seconds."""
    return timeout_minutes * 60 / MIN_REAL_NOTICE_S


@dataclass(frozen=True)
class DemoOptions:
    """`deadline` (real seconds for the whole story) None: BASE_DEADLINE_S plus the sandbox time the
    story may legitimately take (NotBefore timeout + deletion) at `speed`, so that every accepted
    speed, 1 included, can pass."""

    instances: int = 4
    scale_in: int = 2
    timeout_minutes: int = 5
    speed: float = 60.0
    deadline: Optional[float] = None
    hook: Optional[str] = None  # None: the demo drain hook (python -m vmss_terminate_sim.demo_hook)
    kubernetes: bool = False  # the VMs are Kubernetes nodes; agents run with --kubernetes
    central: bool = False  # no agent in any instance: the central handler drains and acknowledges
    windows: bool = False  # a Windows-typed scale set (central only: Run Command takes RunPowerShellScript)
    source: str = "resourcegraph"  # central only: "queue" reads an Event Grid -> Storage queue on Azurite

    @property
    def real_deadline(self) -> float:
        if self.deadline is not None:
            return self.deadline
        return BASE_DEADLINE_S + (self.timeout_minutes * 60 + DELETE_SANDBOX_S) / self.speed

    def validated(self) -> "DemoOptions":
        """Every input checked before anything starts (the hook too: a missing program is exit 2 now,
        not after enable and the upgrade ran)."""
        if not 2 <= self.instances <= 20:
            raise InvalidValue("instances", self.instances, "expected 2..20")
        if not 1 <= self.scale_in < self.instances:
            raise InvalidValue("scale_in", self.scale_in, f"expected 1..{self.instances - 1} "
                                                          "(at least one instance stays)")
        parse_timeout(self.timeout_minutes)  # the one 5..15-minute rule (InvalidTimeout is a UsageError)
        fastest = max_speed(self.timeout_minutes)
        if not 1.0 <= self.speed <= fastest:
            raise InvalidValue("speed", self.speed, f"expected 1..{fastest:g} with a {to_iso(self.timeout_minutes)} "
                               f"timeout (it must last {MIN_REAL_NOTICE_S:g} real seconds for the agents to drain "
                               "and approve; a longer timeout allows a faster clock)")
        if self.deadline is not None and self.deadline <= 0:
            raise InvalidValue("deadline", self.deadline, "must be positive")
        if self.hook is not None:
            check_program(split_command(self.hook))
        if self.source not in ("resourcegraph", "queue"):
            raise InvalidValue("source", self.source, "expected resourcegraph or queue")
        if self.source == "queue" and not self.central:
            raise InvalidValue("source", self.source, "the queue is the central handler's source: add --central")
        if self.windows and not self.central:
            raise InvalidValue("windows", self.windows, "a Windows image runs no agent of ours: add --central")
        return self


@dataclass
class DemoResult:
    ok: bool
    options: DemoOptions
    entries: List[Entry]
    report: List[str]
    totals: Dict[str, Any]
    failure: Optional[str] = None
    deleted: List[str] = field(default_factory=list)
    problems: List[str] = field(default_factory=list)  # every one (`failure` is the first)

    def to_dict(self) -> Dict[str, Any]:
        return {
            "ok": self.ok,
            "failure": self.failure,
            "options": {"instances": self.options.instances, "scale_in": self.options.scale_in,
                        "timeout": to_iso(self.options.timeout_minutes), "speed": self.options.speed,
                        "deadline": self.options.real_deadline, "kubernetes": self.options.kubernetes,
                        "central": self.options.central, "windows": self.options.windows,
                        "source": self.options.source},
            "deleted": self.deleted,
            "problems": self.problems,
            "totals": self.totals,
            "report": self.report,
            "timeline": [e.to_dict() for e in self.entries],
        }


def shown(entry: Entry) -> bool:
    """Entries the text timeline prints (the JSON output has all of them)."""
    if entry.source != "agent":
        return True
    if entry.kind == D.KUBE_EVICTION_REFUSED:
        return attempt_of(entry) == 1
    return entry.kind in AGENT_KINDS_SHOWN


def run_demo(options: DemoOptions = DemoOptions(), on_entry: Optional[Callable[[Entry], None]] = None) -> DemoResult:
    """Run the story; never raises for a story that does not complete (see `DemoResult.failure`)."""
    options = options.validated()
    clock = ScaledClock(speed=options.speed)
    timeline = Timeline(clock)
    if on_entry is not None:
        timeline.subscribe(on_entry)
    _quiet_agent_logs()
    real_start = time.monotonic()
    deadline = real_start + options.real_deadline
    config = SandboxConfig(instances=options.instances, timeout_minutes=None, speed=options.speed,
                           windows=options.windows)
    sandbox = Sandbox(config, clock=clock, timeline=timeline)
    agents: Optional[SandboxAgents] = None
    cluster: Optional[SandboxCluster] = None
    failure: Optional[str] = None
    removed: List[str] = []
    scale_in_at: Optional[Entry] = None
    try:
        sandbox.start()
        if options.kubernetes:
            cluster = SandboxCluster(sandbox).start()
            cluster.add_demo_workload()
        story = _central_story if options.central else _story
        failure, removed, scale_in_at, agents = story(sandbox, options, deadline, cluster)
    finally:
        if agents is not None:
            agents.stop()
        if cluster is not None:
            cluster.stop()
        sandbox.stop()
    outcome = None if options.central else Outcome.read(
        sandbox.scheduler.deletions(), sandbox.timeline.entries(), sandbox.group.approvals, sandbox.vm_names(),
        kubernetes=options.kubernetes)
    problems = [failure] if failure is not None else []
    if outcome is not None:
        problems += outcome.problems(sandbox.speed)
    elif failure is None:
        central = _check_central(sandbox, removed, options)
        if central is None and cluster is not None:
            central = budget_honoured(cluster.state.evictions)
        problems += [central] if central is not None else []
    failure = failure_of(problems)
    totals = _totals(sandbox, options, outcome, removed, scale_in_at, time.monotonic() - real_start)
    if cluster is not None and options.central:  # the cluster's own record of the central drain
        totals.update(pods_evicted=sum(1 for e in cluster.state.evictions if e.code == 200),
                      evictions_refused=sum(1 for e in cluster.state.evictions if e.code == 429),
                      nodes_drained=sum(1 for e in timeline.entries() if e.source == "central"
                                        and e.kind == "kubernetes:drain_ok"))
    timeline.record("demo", "done" if failure is None else "failed", "",
                    "story complete" if failure is None else failure)
    return DemoResult(failure is None, options, timeline.entries(), sandbox.report(), totals, failure, removed,
                      problems)


def _story(sandbox: Sandbox, options: DemoOptions, deadline: float,  # type: ignore[no-untyped-def]
           cluster: Optional[SandboxCluster] = None):
    from vmss_terminate.control import enable
    from vmss_terminate.control.scaleset import ScaleSetClient

    cfg = sandbox.config
    record = sandbox.timeline.record
    connection = sandbox.connection()

    record("control", "enable", "", f"vmss-terminate enable --timeout {to_iso(options.timeout_minutes)} "
                                    f"(PATCH scheduledEventsProfile, then upgrade every instance)")
    result = enable(cfg.resource_group, cfg.name, options.timeout_minutes, connection=connection,
                    clock=sandbox.clock)
    record("control", "enabled", "", result.message, result=result.to_dict())

    kube: Dict[str, Any] = {} if cluster is None else {"kubernetes": True, "kubeconfig": cluster.kubeconfig}
    agents = SandboxAgents(sandbox, hooks=[options.hook or demo_hook_command()], **kube).start()
    # the deadline first: agents that became ready while this thread waited for a core (a loaded
    # machine) must not carry a story whose deadline has passed on into the scale-in
    if time.monotonic() >= deadline or not agents.wait_ready(max(0.0, deadline - time.monotonic())):
        return (f"the {options.real_deadline:g} s deadline passed before every agent was running (learnt its VM "
                f"name from its IMDS); allow more time: a larger --deadline, or leave it out for the default",
                [], None, agents)
    record("demo", "agents_ready", "", f"{len(agents.agents)} agents running, one per instance, each "
                                       f"polling its own IMDS with a drain hook"
                                       + (" and --kubernetes (cordon, evict, wait)" if cluster is not None else ""))

    target = options.instances - options.scale_in
    scale_in_at = record("control", "scale_in", "", f"scale in: PATCH sku.capacity {options.instances} -> {target}")
    with ScaleSetClient(connection, cfg.resource_group, cfg.name) as client:
        client.patch(json.dumps({"sku": {"capacity": target}}).encode("utf-8"))
    removed = [d.vm_name for d in sandbox.scheduler.deletions()]
    if len(removed) != options.scale_in:
        return f"expected {options.scale_in} deletions after the scale-in, saw {len(removed)}", removed, scale_in_at, agents
    if not sandbox.scheduler.wait_deleted(removed, max(0.0, deadline - time.monotonic())):
        pending = [d.vm_name for d in sandbox.scheduler.deletions() if d.deleted_at is None]
        return (f"not deleted within the {options.real_deadline:g} s deadline: {', '.join(pending)}",
                removed, scale_in_at, agents)
    return None, removed, scale_in_at, agents


class _CentralRunning:
    """The in-process central handler of `demo --central`, stopped like the agents."""

    def __init__(self, central: Any, thread: threading.Thread, queue: Any = None) -> None:
        self.central, self.thread, self.queue = central, thread, queue

    def stop(self) -> None:
        self.central.handler.stop()
        self.thread.join(timeout=10)
        self.central.handler.join(timeout=10)
        self.central.close()
        if self.queue is not None:  # the queue source, then Azurite and the Event Grid delivery
            self.central.handler.source.close()
            self.queue.stop()


def _central_story(sandbox: Sandbox, options: DemoOptions, deadline: float,  # type: ignore[no-untyped-def]
                   cluster: Optional[SandboxCluster] = None):
    """No agent anywhere: enable with Event Grid and Resource Graph publishing, one central handler
    polling Resource Graph runs the hook, the node drain and Run Command for each removed VM, then
    acknowledges through the Maintenance RP."""
    from vmss_terminate.central.handler import HandlerConfig
    from vmss_terminate.central.run import build
    from vmss_terminate.control import enable
    from vmss_terminate.control.events_policy import PolicyChange
    from vmss_terminate.control.scaleset import ScaleSetClient
    from vmss_terminate.fleet.scope import Scope

    cfg = sandbox.config
    record = sandbox.timeline.record
    connection = sandbox.connection()
    record("control", "enable", "", f"vmss-terminate enable --timeout {to_iso(options.timeout_minutes)} --event-grid "
                                    "(scheduledEventsProfile and scheduledEventsPolicy, then upgrade every instance)")
    result = enable(cfg.resource_group, cfg.name, options.timeout_minutes, connection=connection,
                    clock=sandbox.clock, policy=PolicyChange(event_grid=True, force=True))
    record("control", "enabled", "", result.message, result=result.to_dict())
    script = "Write-Host draining" if options.windows else "echo draining"
    config = HandlerConfig(hooks=(options.hook or demo_hook_command(),), run_command=script,
                           kubernetes=cluster is not None, poll_interval=0.2, safety_margin=15.0)

    def observe(kind: str, **data: Any) -> None:
        if kind == "action":
            record("central", f"{data.get('action')}_{data.get('outcome')}", str(data.get("vm") or ""),
                   f"{data.get('action')} {data.get('outcome')} for event {str(data.get('event_id'))[:8]}",
                   **{k: v for k, v in data.items() if k != "vm"})
        elif kind in ("acknowledged", "acknowledge_refused", "out_of_scope"):
            record("central", kind, "", f"event {str(data.get('event_id'))[:8]}: {kind.replace('_', ' ')} "
                                        "through the Maintenance RP", **data)

    queue = source = None
    if options.source == "queue":
        from vmss_terminate.central.storage_queue import QueueSettings, open_queue_source
        from vmss_terminate_sim.sandbox.eventgrid_queue import start_queue

        queue = start_queue(sandbox)
        variable = next(iter(queue.env()))
        source = open_queue_source(queue.url, variable, QueueSettings(lease_duration=15, visibility=30),
                                   environ=queue.env())
        record("demo", "queue_ready", "", f"Azurite started; Event Grid delivers each event change to {queue.url}")
    try:
        central = build(Scope.build(subscriptions=[cfg.subscription], resource_groups=[cfg.resource_group]), config,
                        connection=connection, kubeconfig=None if cluster is None else cluster.kubeconfig,
                        clock=sandbox.clock, observe=observe, source=source)
    except BaseException:
        if queue is not None:
            queue.stop()
        raise
    thread = threading.Thread(target=central.handler.run, daemon=True, name="demo-central")
    thread.start()
    running = _CentralRunning(central, thread, queue)
    reads = ("reads the Event Grid -> Storage queue" if queue is not None
             else "polls Resource Graph (maintenanceresources)")
    record("demo", "central_ready", "", f"no agent in any instance: one central handler {reads}, "
                                        "runs a hook and Run Command per VM"
                                        + (", drains its node" if cluster is not None else "")
                                        + ", then acknowledges through the Maintenance RP")
    target = options.instances - options.scale_in
    scale_in_at = record("control", "scale_in", "", f"scale in: PATCH sku.capacity {options.instances} -> {target}")
    with ScaleSetClient(connection, cfg.resource_group, cfg.name) as client:
        client.patch(json.dumps({"sku": {"capacity": target}}).encode("utf-8"))
    removed = [d.vm_name for d in sandbox.scheduler.deletions()]
    if len(removed) != options.scale_in:
        return (f"expected {options.scale_in} deletions after the scale-in, saw {len(removed)}", removed,
                scale_in_at, running)
    if not sandbox.scheduler.wait_deleted(removed, max(0.0, deadline - time.monotonic())):
        pending = [d.vm_name for d in sandbox.scheduler.deletions() if d.deleted_at is None]
        return (f"not deleted within the {options.real_deadline:g} s deadline: {', '.join(pending)}",
                removed, scale_in_at, running)
    return None, removed, scale_in_at, running


def _check_central(sandbox: Sandbox, removed: List[str], options: DemoOptions) -> Optional[str]:
    """Each removed instance: its hook and Run Command finished (and its node drained), then the
    central handler acknowledged its event, before NotBefore; nothing else was acknowledged."""
    entries = [e for e in sandbox.timeline.entries() if e.source == "central"]
    commands = {r.vm_name: r for r in sandbox.state.run_commands.records}
    acks = [a for a in sandbox.state.maintenance.acknowledgements if a.accepted]
    for deletion in sandbox.scheduler.deletions():
        vm = deletion.vm_name
        if deletion.event_id is None:
            return f"{vm} got no Terminate event (its model has no notification)"
        mine = [a for a in acks if a.event_id == deletion.event_id]
        if len(mine) != 1:
            return f"{vm}'s event was acknowledged {len(mine)} times through the Maintenance RP (expected once)"
        if not deletion.start_reason.startswith("approved"):
            return f"{vm} was deleted without the central handler's acknowledgement ({deletion.start_reason})"
        if deletion.not_before is not None and mine[0].at >= deletion.not_before:
            return f"{vm}'s event was acknowledged after its NotBefore"
        kinds = [e.kind for e in entries if e.vm == vm]
        needed = ["hook_ok", "run-command_ok"] + (["kubernetes:drain_ok"] if options.kubernetes else [])
        missing = [k for k in needed if k not in kinds]
        if missing:
            return f"{vm}: {', '.join(missing)} not seen before its deletion"
        drained = [sandbox.timeline.sandbox_start + e.sandbox_s for e in entries
                   if e.vm == vm and e.kind == "kubernetes:drain_ok"]
        if drained and min(drained) > mine[0].at:
            return f"{vm}'s event was acknowledged before its node was drained"
        if vm not in commands or commands[vm].command_id != ("RunPowerShellScript" if options.windows
                                                             else "RunShellScript"):
            return f"{vm}: no Run Command of the right kind reached ARM"
        if commands[vm].at > mine[0].at:
            return f"{vm} was acknowledged before its Run Command"
    stray = [a for a in acks if a.event_id not in {d.event_id for d in sandbox.scheduler.deletions()}]
    if stray or sandbox.state.maintenance.foreign_acknowledgements():
        return "the central handler acknowledged an event that was not a removed instance's"
    return None


def budget_honoured(evictions: Sequence[EvictionRecord]) -> Optional[str]:
    """--central --kubernetes, from the API server's record of every eviction: the story's PDB held
    one back (429) and the central handler's drain retried each refused pod until it was allowed
    (the agent's story claims the same from the agents' timeline); None when so, else why not."""
    refused = {e.uid: e.name for e in evictions if e.code == 429 and e.budget}
    if not refused:
        return "no eviction was held back by the PodDisruptionBudget"
    allowed = {e.uid for e in evictions if e.code == 200}
    never = sorted(name for uid, name in refused.items() if uid not in allowed)
    if never:
        return f"evictions refused by the PodDisruptionBudget were not retried until allowed: {', '.join(never)}"
    return None


def _totals(sandbox: Sandbox, options: DemoOptions, outcome: Optional[Outcome], removed: List[str],
            scale_in_at: Optional[Entry], real_elapsed: float) -> Dict[str, Any]:
    """The counts the summary prints; the agents' story counts `outcome`, the facts its verdict came from."""
    entries = sandbox.timeline.entries()
    deleted = [e for e in entries if e.kind == "deleted"]
    agent = [e for e in entries if e.source == "agent"]
    totals: Dict[str, Any] = {
        "instances_before": options.instances,
        "instances_after": len(sandbox.vm_names()),
        "deleted": len(deleted),
        **(outcome.totals() if outcome is not None else {}),
        "approvals": len([a for a in sandbox.group.approvals if a.accepted]),
        "foreign_approvals": len(sandbox.group.foreign_approvals()),
        "foreign_events_ignored": sum(1 for e in agent if e.kind == D.NOT_OURS),
        "held_back": sum(1 for e in entries if e.kind == "held_back"),
        **({"pods_evicted": sum(1 for e in agent if e.kind == D.KUBE_EVICTED),
            "evictions_refused": sum(1 for e in agent if e.kind == D.KUBE_EVICTION_REFUSED)}
           if options.kubernetes and not options.central else {}),
        **({"central_hooks_ok": sum(1 for e in entries if e.source == "central" and e.kind == "hook_ok"),
            "central_run_commands": len(sandbox.state.run_commands.records),
            "central_acknowledged": sum(1 for e in entries if e.source == "central" and e.kind == "acknowledged"),
            "agents": 0} if options.central else {}),
        "not_before_timeout_s": options.timeout_minutes * 60,
        "speed": options.speed,
        "real_s": round(real_elapsed, 2),
    }
    if scale_in_at is not None and len(deleted) == len(removed) and deleted:
        last = deleted[-1]
        totals["scale_in_to_deleted_sandbox_s"] = round(last.sandbox_s - scale_in_at.sandbox_s, 1)
        totals["scale_in_to_deleted_real_s"] = round(last.real_s - scale_in_at.real_s, 2)
    return totals


def render_text(result: DemoResult) -> List[str]:
    """The summary printed after the live timeline."""
    o, t = result.options, result.totals
    lines = ["", "What happened to each removed instance:"]
    lines += [f"  {line}" for line in result.report] or ["  (no deletion)"]
    lines.append("")
    if o.central:
        lines.append(
            f"Totals: {t['deleted']}/{o.scale_in} instances deleted, no agent anywhere: the central handler ran "
            f"{t['central_hooks_ok']} hooks and {t['central_run_commands']} Run Commands "
            f"({'RunPowerShellScript' if o.windows else 'RunShellScript'}), then acknowledged "
            f"{t['central_acknowledged']} events through the Maintenance RP; {t['instances_after']} instances left.")
    else:
        lines.append(
            f"Totals: {t['deleted']}/{o.scale_in} instances deleted, {t['drained_and_approved']} of them after "
            f"their own agent drained and approved, {t['approved_without_draining']} approved without draining, "
            f"{t['hooks_finished']} drain hooks finished, {t['hooks_failed']} failed, {t['approvals']} approvals "
            f"({t['foreign_approvals']} foreign), {t['foreign_events_ignored']} foreign events ignored by agents, "
            f"{t['instances_after']} instances left.")
    if o.kubernetes and o.central and "pods_evicted" in t:
        lines.append(f"Kubernetes, from the cluster side: {t['pods_evicted']} pods evicted ({t['evictions_refused']} "
                     f"evictions answered 429 by the PodDisruptionBudget and retried), DaemonSet pods left in "
                     f"place" + ("; each event acknowledged only after its node was drained." if result.ok else "."))
    if o.kubernetes and not o.central:
        undrained = t["approved_before_node_drained"]
        verdict = ("each VM approved only after its node was drained." if not undrained and not t["nodes_not_drained"]
                   else f"{undrained} VM(s) approved before their node was drained.")
        lines.append(f"Kubernetes: {t['nodes_drained']} nodes cordoned and drained"
                     + (f", {t['nodes_not_drained']} not drained" if t["nodes_not_drained"] else "")
                     + f", {t['pods_evicted']} pods evicted ({t['evictions_refused']} evictions held back by the "
                     f"PodDisruptionBudget and retried), DaemonSet pods left in place; {verdict}")
    if "scale_in_to_deleted_sandbox_s" in t:
        line = (f"Scale-in to last deletion: {t['scale_in_to_deleted_sandbox_s']:.0f} s sandbox time "
                f"({t['scale_in_to_deleted_real_s']:.2f} s real)")
        if result.ok:
            line += f" instead of waiting out the {t['not_before_timeout_s']} s NotBefore timeout"
        lines.append(line + ".")
    lines.append(f"Wall time: {t['real_s']:.2f} s (sandbox clock x{o.speed:g}).")
    if result.ok:  # a failure is said once, by the error line the CLI prints after this summary
        lines.append("OK: graceful scale-in completed.")
    return lines


def _quiet_agent_logs() -> None:
    """The demo's agents run in this process and their decisions are on the timeline (with the VM
    name); without logging configured, Python's last-resort handler would also print their warnings
    raw on stderr ("hook hook#1:false failed"). A NullHandler stops only that last-resort print:
    handlers an application configured still get every record."""
    logger = logging.getLogger("vmss_terminate.agent")
    if not any(isinstance(handler, logging.NullHandler) for handler in logger.handlers):
        logger.addHandler(logging.NullHandler())


def header(options: DemoOptions) -> List[str]:
    return [
        f"vmss-terminate demo: {options.instances} instances, scale in by {options.scale_in}, "
        f"notBeforeTimeout {to_iso(options.timeout_minutes)}, sandbox clock x{options.speed:g} "
        f"(local emulators, no Azure)",
        "",
        TIMELINE_HEADER,
    ]
