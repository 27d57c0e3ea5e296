"""A scale set's scheduled-events policy: `properties.scheduledEventsPolicy`, the top-level property
that publishes its scheduled events to Event Grid and Resource Graph and lets Azure approve some
user-initiated events by itself. Parsed from ARM's wire JSON, and changed by `PolicyChange`.

Why its own module, apart from `profile.py`: the policy sits at `properties.scheduledEventsPolicy`,
not under `virtualMachineProfile` like `scheduledEventsProfile`, so it is not part of the VM model:
changing it makes no instance stale and needs no upgrade (docs/control-plane.md cites the sources).
No Azure SDK and nothing of the package but `errors.py`: `iac/` renders from it too.

Facts (azure-rest-api-specs, Microsoft.Compute; cited in docs/control-plane.md):

* `userInitiatedReboot`, `userInitiatedRedeploy` (`automaticallyApprove`) and
  `scheduledEventsAdditionalPublishingTargets.eventGridAndResourceGraph.enable` exist from compute
  api-version 2024-03-01; `allInstancesDown` and `eventGridAndResourceGraph.scheduledEventsApiVersion`
  from 2025-04-01.
* Publishing to Event Grid and Resource Graph is preview and needs the subscription feature
  `Microsoft.Compute/SendScheduledEventsPolicy` registered.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Dict, Iterable, List, Optional, Tuple

from vmss_terminate.errors import InvalidValue, UsageError
from vmss_terminate.params import option

POLICY = "scheduledEventsPolicy"
TARGETS = "scheduledEventsAdditionalPublishingTargets"
EVENT_GRID = "eventGridAndResourceGraph"
EVENTS_API_VERSION = "scheduledEventsApiVersion"
APPROVE = "automaticallyApprove"

KINDS: Dict[str, str] = {
    "user-reboot": "userInitiatedReboot",
    "user-redeploy": "userInitiatedRedeploy",
    "all-instances-down": "allInstancesDown",
}
"""`--auto-approve KIND` -> the member of scheduledEventsPolicy that carries its automaticallyApprove."""

POLICY_MIN_API = "2024-03-01"
"""scheduledEventsPolicy with userInitiatedReboot/-Redeploy and eventGridAndResourceGraph.enable."""
NEWER_MIN_API = "2025-04-01"
"""allInstancesDown and eventGridAndResourceGraph.scheduledEventsApiVersion."""
KIND_MIN_API = {"user-reboot": POLICY_MIN_API, "user-redeploy": POLICY_MIN_API, "all-instances-down": NEWER_MIN_API}

FEATURE_NAMESPACE = "Microsoft.Compute"
FEATURE_NAME = "SendScheduledEventsPolicy"
FEATURES_API_VERSION = "2021-07-01"
"""Microsoft.Features' Features_Get: GET /subscriptions/{id}/providers/Microsoft.Features/providers/
{namespace}/features/{name}?api-version=2021-07-01 -> {"properties": {"state": "Registered"}, ...}."""

_VERSION = re.compile(r"^\d{4}-\d{2}-\d{2}(-preview)?$")


FORCE_HELP = ("Skip the check that the subscription has the preview feature "
              "Microsoft.Compute/SendScheduledEventsPolicy registered before --event-grid turns publishing on.")
"""`--force`'s help, for `enable`/`disable` and `fleet rollout` alike."""


def register_command(subscription_id: str) -> str:
    """The `az feature register` line that registers the preview feature in this subscription."""
    return (f"az feature register --namespace {FEATURE_NAMESPACE} --name {FEATURE_NAME} "
            f"--subscription {subscription_id}")


def _dict(value: Any) -> Dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _flag(value: Any) -> Optional[bool]:
    return value if isinstance(value, bool) else None


@dataclass
class PolicyState:
    """What a scale set's scheduledEventsPolicy says. `None` values are not set (or not booleans)."""

    present: bool
    event_grid: Optional[bool] = None
    events_api_version: Optional[str] = None
    auto_approve: Dict[str, Optional[bool]] = field(default_factory=dict)

    @property
    def publishes(self) -> bool:
        """Events go to Event Grid and Resource Graph (`eventGridAndResourceGraph.enable` is true)."""
        return self.event_grid is True

    def approves(self, kind: str) -> bool:
        return self.auto_approve.get(kind) is True

    @property
    def approved_kinds(self) -> List[str]:
        return [kind for kind in KINDS if self.approves(kind)]

    def describe(self) -> str:
        if not self.present:
            return "not configured (no scheduledEventsPolicy)"
        grid = {True: "on", False: "off", None: "not set"}[self.event_grid]
        text = f"Event Grid and Resource Graph {grid}"
        if self.events_api_version:
            text += f" (schema {self.events_api_version})"
        approved = self.approved_kinds
        text += f"; auto-approve: {', '.join(approved) if approved else 'none'}"
        return text

    def to_dict(self) -> Dict[str, Any]:
        return {
            "present": self.present,
            "event_grid": self.event_grid,
            "events_api_version": self.events_api_version,
            "auto_approve": {kind: self.auto_approve.get(kind) for kind in KINDS},
        }


def parse_policy(scale_set: Dict[str, Any]) -> PolicyState:
    """The policy of a scale set as ARM (or a Resource Graph row) returns it."""
    return parse_policy_value(_dict(scale_set.get("properties")).get(POLICY))


def parse_policy_value(policy: Any) -> PolicyState:
    """The same reading from the `scheduledEventsPolicy` value alone (None when the key is absent)."""
    if not isinstance(policy, dict):
        return PolicyState(False)
    grid = _dict(_dict(policy.get(TARGETS)).get(EVENT_GRID))
    version = grid.get(EVENTS_API_VERSION)
    return PolicyState(
        True,
        event_grid=_flag(grid.get("enable")),
        events_api_version=str(version) if version else None,
        auto_approve={kind: _flag(_dict(policy.get(member)).get(APPROVE)) for kind, member in KINDS.items()},
    )


@dataclass(frozen=True)
class PolicyChange:
    """What `enable`/`disable`/`fleet rollout` are asked to change in the policy; every field left
    at None/empty leaves that part of the policy alone (a PATCH merges).

    `event_grid`: True/False publishes or stops publishing (`--event-grid/--no-event-grid`);
    `events_api_version`: the Scheduled Events schema delivered there (`--events-api-version`);
    `auto_approve` / `no_auto_approve`: KINDs (`user-reboot`, `user-redeploy`, `all-instances-down`)
    whose automaticallyApprove becomes true / false. Checked on construction (exit 2)."""

    event_grid: Optional[bool] = option(
        None, kind="switch",
        help="PREVIEW: publish the set's scheduled events to Event Grid and Resource Graph "
             "(scheduledEventsPolicy; compute api-version >= 2024-03-01; the subscription needs the feature "
             "Microsoft.Compute/SendScheduledEventsPolicy registered, checked first unless --force), or stop "
             "publishing them. Neither: left as it is.")
    events_api_version: Optional[str] = option(
        metavar="VERSION",
        help="The Scheduled Events schema (api-version, e.g. 2020-07-01) delivered to Event Grid and Resource "
             "Graph (compute api-version >= 2025-04-01).")
    auto_approve: Tuple[str, ...] = option(
        (), multiple=True, metavar="KIND", choices=tuple(KINDS),
        help="Let Azure approve these events by itself (repeatable): user-reboot, user-redeploy (compute "
             "api-version >= 2024-03-01), all-instances-down (>= 2025-04-01). Auto-approved events never show "
             "as Scheduled: only Started and Completed.")
    no_auto_approve: Tuple[str, ...] = option(
        (), multiple=True, metavar="KIND", choices=tuple(KINDS),
        help="Stop Azure approving these events by itself (repeatable; writes automaticallyApprove false).")
    force: bool = option(False, help=FORCE_HELP)
    """Not part of the change: skip the preview-feature check before turning publishing on."""

    def __post_init__(self) -> None:
        approve = _kinds(self.auto_approve, "auto_approve")
        refuse = _kinds(self.no_auto_approve, "no_auto_approve")
        both = sorted(set(approve) & set(refuse), key=list(KINDS).index)
        if both:
            raise UsageError(f"auto_approve and no_auto_approve both name {', '.join(both)}: pass each kind once",
                             cli_message=f"--auto-approve and --no-auto-approve both name {', '.join(both)}: "
                                         "pass each kind once")
        object.__setattr__(self, "auto_approve", approve)
        object.__setattr__(self, "no_auto_approve", refuse)
        if self.events_api_version is not None:
            text = str(self.events_api_version).strip()
            if not _VERSION.match(text):
                raise InvalidValue("events_api_version", self.events_api_version,
                                   "expected a Scheduled Events api-version, YYYY-MM-DD (e.g. 2020-07-01)")
            if self.event_grid is False:
                raise UsageError("events_api_version names the schema delivered to Event Grid and Resource Graph: "
                                 "it makes no sense with event_grid=False",
                                 cli_message="--events-api-version names the schema delivered to Event Grid and "
                                             "Resource Graph: it makes no sense with --no-event-grid")
            object.__setattr__(self, "events_api_version", text)

    @classmethod
    def of(cls, event_grid: Optional[bool] = None, events_api_version: Optional[str] = None,
           auto_approve: Iterable[str] = (), no_auto_approve: Iterable[str] = (),
           force: bool = False) -> Optional["PolicyChange"]:
        """A change, or None when nothing is asked (the CLI's options all absent; --force alone asks nothing)."""
        change = cls(event_grid, events_api_version, tuple(auto_approve), tuple(no_auto_approve), force)
        return None if change.empty else change

    @property
    def empty(self) -> bool:
        return (self.event_grid is None and self.events_api_version is None and not self.auto_approve
                and not self.no_auto_approve)

    @property
    def enables_event_grid(self) -> bool:
        return self.event_grid is True

    def needs(self) -> Optional[Tuple[str, str]]:
        """(compute api-version, the option that needs it): the newest api-version this change needs."""
        needed: List[Tuple[str, str]] = []
        if self.event_grid is not None:
            needed.append((POLICY_MIN_API, "--event-grid" if self.event_grid else "--no-event-grid"))
        if self.events_api_version is not None:
            needed.append((NEWER_MIN_API, "--events-api-version"))
        for kind in self.auto_approve:
            needed.append((KIND_MIN_API[kind], f"--auto-approve {kind}"))
        for kind in self.no_auto_approve:
            needed.append((KIND_MIN_API[kind], f"--no-auto-approve {kind}"))
        return max(needed) if needed else None

    def check_api_version(self, pinned: Optional[str]) -> None:
        """A pinned compute api-version older than what an option needs: exit 2 naming the version."""
        needed = self.needs()
        if pinned is None or needed is None or pinned[:10] >= needed[0]:
            return
        raise UsageError(f"compute api-version {pinned} is too old for the scheduled-events policy: {needed[1]} "
                         f"needs {needed[0]} or later",
                         cli_message=f"--api-version {pinned} is too old for {needed[1]}: it needs compute "
                                     f"api-version {needed[0]} or later (unpin it, or pin {needed[0]} or later)")

    def fragment(self) -> Dict[str, Any]:
        """The `scheduledEventsPolicy` value a PATCH carries: only what was asked (a PATCH merges)."""
        out: Dict[str, Any] = {}
        grid: Dict[str, Any] = {}
        if self.event_grid is not None:
            grid["enable"] = self.event_grid
        if self.events_api_version is not None:
            grid[EVENTS_API_VERSION] = self.events_api_version
        if grid:
            out[TARGETS] = {EVENT_GRID: grid}
        for kind in KINDS:
            if kind in self.auto_approve or kind in self.no_auto_approve:
                out[KINDS[kind]] = {APPROVE: kind in self.auto_approve}
        return out

    def satisfied_by(self, state: PolicyState) -> bool:
        """Already what this change would write (then no PATCH)."""
        # unset publishes nothing ("By default, scheduled events aren't delivered to Event Grid"): --no-event-grid
        # is satisfied by it; an auto-approval is turned off by writing false, never by trusting a default
        if self.event_grid is not None and state.publishes is not self.event_grid:
            return False
        if self.events_api_version is not None and state.events_api_version != self.events_api_version:
            return False
        for kind in self.auto_approve:
            if state.auto_approve.get(kind) is not True:
                return False
        for kind in self.no_auto_approve:
            if state.auto_approve.get(kind) is not False:
                return False
        return True

    def applied_to(self, state: PolicyState) -> PolicyState:
        """The policy as it reads once this change is applied."""
        approve = dict(state.auto_approve)
        for kind in self.auto_approve:
            approve[kind] = True
        for kind in self.no_auto_approve:
            approve[kind] = False
        return PolicyState(
            True,
            event_grid=self.event_grid if self.event_grid is not None else state.event_grid,
            events_api_version=self.events_api_version or state.events_api_version,
            auto_approve={kind: approve.get(kind) for kind in KINDS},
        )

    def describe(self) -> str:
        parts = []
        if self.event_grid is not None:
            parts.append(f"Event Grid and Resource Graph {'on' if self.event_grid else 'off'}")
        if self.events_api_version is not None:
            parts.append(f"schema {self.events_api_version}")
        if self.auto_approve:
            parts.append(f"auto-approve {', '.join(self.auto_approve)}")
        if self.no_auto_approve:
            parts.append(f"no auto-approve {', '.join(self.no_auto_approve)}")
        return "; ".join(parts)

    def args(self) -> List[str]:
        """The command-line options that ask for this change (for printed resume commands)."""
        out = []
        if self.event_grid is not None:
            out.append("--event-grid" if self.event_grid else "--no-event-grid")
        if self.events_api_version is not None:
            out += ["--events-api-version", self.events_api_version]
        for kind in self.auto_approve:
            out += ["--auto-approve", kind]
        for kind in self.no_auto_approve:
            out += ["--no-auto-approve", kind]
        if self.force:
            out.append("--force")
        return out

    def to_dict(self) -> Dict[str, Any]:
        return {"event_grid": self.event_grid, "events_api_version": self.events_api_version,
                "auto_approve": list(self.auto_approve), "no_auto_approve": list(self.no_auto_approve)}


def _kinds(values: Iterable[str], param: str) -> Tuple[str, ...]:
    out: List[str] = []
    for value in values:
        kind = str(value).strip().lower()
        if kind not in KINDS:
            raise InvalidValue(param, value, f"choose one of {', '.join(KINDS)}")
        if kind not in out:
            out.append(kind)
    return tuple(sorted(out, key=list(KINDS).index))
