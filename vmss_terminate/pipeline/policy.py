"""The approval policy: which event may be approved, when, and after which hooks. Pure.

Every function here takes the facts (the event, this VM's name, the config, what the journal
says about the event's hooks, the time) and returns a verdict; nothing here does I/O, holds a lock
or starts a thread, so every rule is tested directly (tests/agent/test_policy.py). The agent loop
(`agent.py`) gathers the facts, asks, and carries the verdict out.

The rules, in order:
1. Only our own events (our VM name is one of Resources, see `events.owns`) and only while they
   are Scheduled: a Started event is too late to prepare or approve.
2. Hooks run first when any subscribes to the event's type; an event already approved is done.
   A hook recorded as started but not finished was interrupted by an agent restart. An event whose
   data cannot reach a command hook (a NUL byte in its EventId) runs no hook and is not approved.
3. Approve only a type in `approve_types`, not after a failed hook with on_hook_failure=wait, and
   not an event that also names other VMs unless `approve_shared`.
4. A hook may start only before its deadline, NotBefore minus the safety margin. A NotBefore that
   cannot be believed -- unreadable, not after the moment the hooks began (a garbage year, a VM
   clock ahead of Azure's) or further ahead than the longest documented notice for the type --
   counts as the longest Terminate notice from when the hooks began: hooks are never skipped as
   "too late" on a deadline that only looked passed (Azure starts the event at its real NotBefore
   anyway, so draining is never worse than approving undrained).
5. Drain: an own event of a drain type (the `hook_events` types, always Terminate) makes the
   instance not ready (`/readyz` 503) from the moment it is seen. With `drain_delay` the approval
   waits until at least that many seconds after that moment, bounded by the hook deadline (rule 4),
   while the hooks run in parallel. The drain ends when such an event leaves the document, unless
   the VM is going away (a Terminate or Preempt that was approved or started).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Collection, Mapping, Optional, Protocol, Sequence, Tuple

from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.events import EVERY_LISTED_VM, Event, same_name
from vmss_terminate.pipeline.hooks import unpassable_variables
from vmss_terminate.scheduled_events import DEPARTING, EVENT_TYPE_FACTS, MAX_TERMINATE_NOTICE, NO_NODE_DRAIN

# What the agent should do with an event (Verdict.action).
IGNORE = "ignore"        # not ours, not Scheduled, or gone from ours: nothing to do, nothing to say
DONE = "done"            # already approved
RUN_HOOKS = "run_hooks"  # start the event's hooks (resume after the ones already finished)
INTERRUPTED = "interrupted"  # a hook was started by a previous agent and never finished
OBSERVE = "observe"      # ours, but no hook subscribes and the type is not approved: watch only
WITHHOLD = "withhold"    # ours, but not approved (reason in `message`, reported once)
APPROVE = "approve"      # send the approval now
DRAIN_WAIT = "drain_wait"  # approvable, but the drain delay is not over (until `Verdict.until`)


UNKNOWN_NOTICE = MAX_TERMINATE_NOTICE  # seconds assumed until an unreadable NotBefore


class Settings(Protocol):
    """The options the pipeline reads (a source's own config, e.g. `AgentConfig`, has them all)."""

    @property
    def hooks(self) -> Sequence[str]: ...
    @property
    def hook_events(self) -> Collection[str]: ...
    @property
    def approve_types(self) -> Collection[str]: ...
    @property
    def approve_shared(self) -> bool: ...
    @property
    def on_hook_failure(self) -> str: ...
    @property
    def drain_delay(self) -> float: ...
    @property
    def safety_margin(self) -> float: ...
    @property
    def kill_grace(self) -> float: ...
    @property
    def rerun_interrupted(self) -> bool: ...
    @property
    def webhook(self) -> Optional[str]: ...
    @property
    def webhook_format(self) -> str: ...
    @property
    def option_names(self) -> Mapping[str, str]:
        """The source's command-line spelling of the settings its messages name ("approve_types",
        "approve_shared", "on_hook_failure"): the agent's `--on-hook-failure` is `central run`'s
        `--on-failure`, and a message must name the option the user can type."""


@dataclass(frozen=True)
class Progress:
    """What the journal says about an event's hooks and approval (the policy's memory)."""

    approved: bool = False
    hooks_started: bool = False
    hooks_finished: bool = False
    hooks_failed: bool = False
    drain_since: Optional[float] = None  # when the drain began (/readyz turned 503)
    covered: Optional[Tuple[str, ...]] = None  # the listed VMs the finished steps ran for (None: unknown)

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> "Progress":
        since, covered = record.get("drain_started"), record.get("covered")
        return cls(approved=bool(record.get("approved")), hooks_started=bool(record.get("hooks_started")),
                   hooks_finished=bool(record.get("hooks_finished")),
                   hooks_failed=record.get("hooks_result") == "failed",
                   drain_since=float(since) if isinstance(since, (int, float)) else None,
                   covered=tuple(str(vm) for vm in covered) if isinstance(covered, list) else None)


@dataclass(frozen=True)
class Verdict:
    """The policy's answer. `kind` is the decision to report for WITHHOLD/OBSERVE (once per event)."""

    action: str
    message: str = ""
    kind: Optional[str] = None
    others: Tuple[str, ...] = ()
    until: Optional[float] = None  # DRAIN_WAIT: when the approval may be sent


def command_hooks_apply(event_type: str, config: Settings) -> bool:
    """`--hook` commands and the webhook run for the types in `hook_events` (always Terminate)."""
    return event_type in config.hook_events


def _runs_commands(event: Event, config: Settings) -> bool:
    return bool(config.hooks) and command_hooks_apply(event.event_type, config)


def handler_applies(subscribed: str, event_type: str) -> bool:
    """A Python handler registered with `Agent.on(subscribed, fn)` runs for this type."""
    return subscribed in ("*", event_type)


def drains_node(event_type: str) -> bool:
    """`--kubernetes` may drain the node for this type (`EventTypeFacts.drains_node`: never a Freeze)."""
    return event_type not in NO_NODE_DRAIN


def acts_for(event: Event, vm_name: str) -> bool:
    """The source acts for this event: it names the source's VM, or the source acts for every VM
    an event lists (`EVERY_LISTED_VM`: a central handler, which hands over only events in its scope)."""
    return vm_name == EVERY_LISTED_VM or event.names(vm_name)


def lists_no_vm(event: Event, vm_name: str) -> Optional[Verdict]:
    """A source acting for every listed VM read the event with no `Resources`: no per-VM step can
    run, and what an approval would release is unknown (an incomplete answer), so it is withheld;
    a later read that lists VMs is handled then."""
    if vm_name != EVERY_LISTED_VM or event.resources:
        return None
    return Verdict(WITHHOLD, f"not acting on {event.event_type} {event.event_id} and not approving it: the event "
                             f"as read lists no VM (empty Resources), so no step could run for the VMs an "
                             f"approval would release; handled when a read lists them, else it starts at "
                             f"NotBefore", kind=D.APPROVAL_WITHHELD)


def uncovered(event: Event, vm_name: str, progress: Progress) -> Tuple[str, ...]:
    """Listed VMs the finished steps did not run for: a source acting for every listed VM saw the
    event grow (Azure added a VM) after its steps began. Approving now would release a VM whose
    steps never ran; those steps run first (a per-VM step skips the VMs it finished)."""
    if vm_name != EVERY_LISTED_VM or progress.covered is None:
        return ()
    return tuple(vm for vm in event.resources if not any(same_name(vm, c) for c in progress.covered))


def next_step(event: Event, vm_name: str, config: Settings, progress: Progress, has_hooks: bool,
              now: Optional[float] = None) -> Verdict:
    """What to do with `event` now that it is in the document (no job of ours is running its hooks)."""
    if not acts_for(event, vm_name) or not event.scheduled:
        return Verdict(IGNORE)
    if progress.approved:
        return Verdict(DONE)
    empty = lists_no_vm(event, vm_name)
    if empty is not None:
        return empty
    unpassable = unpassable_variables(event, vm_name) if has_hooks and _runs_commands(event, config) else []
    if unpassable and not progress.hooks_finished:
        # Neither "hook failed, approve anyway" nor a silent skip: approving would let the VM go undrained.
        return Verdict(WITHHOLD, f"not running the hooks of {event.event_type} {event.event_id!r} and not "
                                 f"approving it: {', '.join(unpassable)} would hold a character no process "
                                 f"environment can carry (a NUL byte or an unencodable character; IMDS "
                                 f"never sends these); the event starts at NotBefore", kind=D.HOOK_FAILED)
    grown = uncovered(event, vm_name, progress) if has_hooks else ()
    if grown:
        return Verdict(RUN_HOOKS, f"{event.event_type} {event.event_id} now also lists {', '.join(grown)}: "
                                  f"their steps run before it is approved")
    if has_hooks and not progress.hooks_finished:
        if progress.hooks_started:
            return Verdict(INTERRUPTED, "a hook was started by a previous agent and never finished")
        return Verdict(RUN_HOOKS)
    if not has_hooks and event.event_type not in config.approve_types:
        return Verdict(OBSERVE, f"{event.event_type} {event.event_id} is ours; observed only "
                                f"(no hook subscribed, type not in {_option(config, 'approve_types')})", kind=D.OBSERVED)
    return approval(event, vm_name, config, progress, now)


def _option(config: Settings, name: str) -> str:
    """The option setting `name` as the user spells it for this source (`Settings.option_names`)."""
    return config.option_names.get(name) or "--" + name.replace("_", "-")


def approval(event: Event, vm_name: str, config: Settings, progress: Progress,
             now: Optional[float] = None) -> Verdict:
    """Whether `event` may be approved now (`now` on the agent's clock), its hooks being done (or
    none subscribed). Without `now` the drain delay counts as not over."""
    eid = event.event_id
    if progress.approved:
        return Verdict(DONE)
    if event.event_type not in config.approve_types:
        listed = ", ".join(sorted(config.approve_types)) or "none"
        return Verdict(WITHHOLD, f"not approving {event.event_type} {eid}: type not in {_option(config, 'approve_types')} ({listed})",
                       kind=D.APPROVAL_WITHHELD)
    if progress.hooks_failed and config.on_hook_failure == "wait":
        return Verdict(WITHHOLD, f"not approving {eid}: a hook failed and {_option(config, 'on_hook_failure')}=wait; "
                                 f"it starts at NotBefore", kind=D.APPROVAL_WITHHELD)
    if not acts_for(event, vm_name) or not event.scheduled:
        return Verdict(IGNORE)  # no longer ours (Resources changed) or started: never approve it
    empty = lists_no_vm(event, vm_name)
    if empty is not None:
        return empty
    grown = uncovered(event, vm_name, progress)
    if grown:  # the next sighting runs their steps (next_step), then approves
        return Verdict(RUN_HOOKS, f"not approving {eid} yet: it now also lists {', '.join(grown)}")
    others = () if vm_name == EVERY_LISTED_VM else tuple(event.others(vm_name))
    if others and not config.approve_shared:
        return Verdict(WITHHOLD, f"not approving {event.event_type} {eid}: it also names {', '.join(others)}; "
                                 f"approving would release them before they drain (use {_option(config, 'approve_shared')}); "
                                 f"it starts at NotBefore", kind=D.SHARED_NOT_APPROVED, others=others)
    until = drain_until(event, config, progress)
    if until is not None and (now is None or now < until):
        return Verdict(DRAIN_WAIT, f"approval of {eid} waits for the drain delay ({config.drain_delay:g} s "
                                   f"after /readyz turned 503)", until=until)
    return Verdict(APPROVE)


@dataclass(frozen=True)
class Resume:
    """What to do after a restart found a hook started but not finished."""

    rerun: bool
    message: str
    changed: str = ""  # non-empty: the hook list differs from the one the previous agent ran


def resume_after_restart(record: Mapping[str, Any], current: Sequence[str], rerun_interrupted: bool,
                         resumable: Sequence[str] = ()) -> Resume:
    """The documented rule: hooks are known by position and program (`hook#2:/usr/bin/drain`). After
    a restart the current list runs; a hook that finished and is still in it is not run again; the
    interrupted one runs again if it is still in the list. A changed list is said, with both lists.
    A step in `resumable` (the node drain, which continues where it was) is resumed even when
    `rerun_interrupted` is off: an interrupted drain is never taken for a finished one."""
    step = str(record.get("current_step") or "?")
    if step in resumable and step in current:
        rerun_interrupted = True
    previous = record.get("hooks")
    done = [name for name in record.get("steps_done") or () if name in current]
    changed = ""
    if isinstance(previous, list) and list(previous) != list(current):
        changed = (f"the hooks changed since the previous agent started them: were {', '.join(previous) or 'none'}; "
                   f"now {', '.join(current) or 'none'}. Finished hooks still configured are not rerun "
                   f"({', '.join(done) or 'none'}); the others run")
    if not rerun_interrupted:
        return Resume(False, f"hook {step} was interrupted by an agent restart; not rerun "
                             f"(rerun_interrupted=False)", changed)
    if step in done:  # killed after the hook's finish was recorded, before the hooks' end was
        return Resume(True, f"hook {step} finished before the agent restarted; not rerun, the hooks after "
                            f"it run", changed)
    if step in current:
        return Resume(True, f"hook {step} was interrupted by an agent restart; rerunning it", changed)
    left = [name for name in current if name not in done]
    return Resume(True, f"hook {step} was interrupted by an agent restart and is no longer configured; "
                        f"running the configured hooks that have not finished: {', '.join(left) or 'none'}", changed)


def drains(event: Event, vm_name: str, config: Settings) -> bool:
    """An own event of a drain type (`hook_events`, always Terminate): the instance is not ready
    (/readyz 503) from the moment it is seen, whatever its status."""
    return event.names(vm_name) and event.event_type in config.hook_events


def drain_until(event: Event, config: Settings, progress: Progress) -> Optional[float]:
    """When the drain delay lets the approval go: `drain_delay` seconds after the drain began, but
    never after the hook deadline (NotBefore minus the safety margin), exactly as hooks are bounded.
    None: no delay applies (none configured, or the drain has not begun)."""
    if config.drain_delay <= 0 or progress.drain_since is None:
        return None
    until = progress.drain_since + config.drain_delay
    deadline = hook_deadline(assumed_not_before(event, progress.drain_since), config)
    return until if deadline is None else min(until, deadline)


def drain_ends_when_gone(event_type: str, started_or_approved: bool) -> bool:
    """A drain event that left the document ends the drain (/readyz 200 again), unless this VM is
    going away: a Terminate or Preempt that was approved or started is never undone."""
    return not (event_type in DEPARTING and started_or_approved)


GONE_AFTER_POLLS = 2  # consecutive answers without an event before it counts as gone for good ...
GONE_AFTER = 5.0  # ... spanning at least this many seconds (IMDS answers do not always list every event)


def gone_for_good(polls: int, since: float, now: float) -> bool:
    """An event absent from `polls` consecutive answers since `since` has left the document for good
    (scale-in cancelled, or done): only then is its node drain stopped and its cordon undone. An event
    that drops out of one answer and comes back is the same event, still being drained."""
    return polls >= GONE_AFTER_POLLS and now - since >= GONE_AFTER


def departing(record: Mapping[str, Any], last: Optional[Event], now: float) -> bool:
    """The VM may be going away for this event: it was approved, or its approval was being sent (an
    agent killed mid-POST cannot know whether Azure got it), or it started (seen Started once, as the
    journal's `started` keeps: someone approved it, Azure began), or its NotBefore passed
    (Azure starts it then). Its node is never uncordoned."""
    not_before = last.not_before if last is not None else None
    return bool(record.get("approved") or record.get("approval_started") or record.get("started")
                or (last is not None and last.started)
                or (not_before is not None and now >= not_before))


def longest_notice(event_type: str) -> float:
    """The longest notice Azure documents for a type (never less than the longest Terminate notice):
    a NotBefore further ahead than this is absurd."""
    facts = EVENT_TYPE_FACTS.get(event_type)
    return max(facts.minimum_notice if facts is not None else 0.0, MAX_TERMINATE_NOTICE)


def assumed_not_before(event: Event, began: float) -> float:
    """NotBefore as seen from `began` (when the hooks or the drain began) if believable, else the
    longest Terminate notice from `began`: a hook is never skipped as too late on a NotBefore that
    only reads as past (year 0001 parsed as 2001, a VM clock ahead of Azure's), and never runs forever."""
    not_before = event.not_before
    if not_before is not None and began < not_before <= began + longest_notice(event.event_type):
        return not_before
    return began + UNKNOWN_NOTICE


def hook_deadline(not_before: Optional[float], config: Settings) -> Optional[float]:
    """When hooks are stopped: NotBefore minus the safety margin (None: no NotBefore known)."""
    return None if not_before is None else not_before - config.safety_margin


def too_late_to_start(deadline: Optional[float], now: float) -> bool:
    """A hook is not started once its deadline has passed."""
    return deadline is not None and deadline <= now
