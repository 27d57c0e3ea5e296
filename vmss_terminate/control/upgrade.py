"""Bringing instances to the latest scale set model after a profile change.

A new `notBeforeTimeout` only reaches an instance once it runs the latest model (the Terminate
event otherwise carries the old NotBefore). What to do depends on the upgrade policy:

* Manual: we POST `manualupgrade` for the stale instances (latestModelApplied false), in batches,
  awaiting each batch and stopping at the first failure. Only stale instances are sent, so a
  re-run resumes where a failed run stopped.
* Automatic / Rolling: the platform rolls the model out; we report, and with `wait` poll (bounded,
  on an injectable clock) until every instance is current.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass, field
from typing import Any, Callable, Dict, List, Optional, Sequence

from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.control.operations import DEFAULT_TIMEOUT, OperationStillRunning
from vmss_terminate.control.profile import InstanceState
from vmss_terminate.errors import AzureError, InvalidValue, interrupt_exit_code, interrupt_name
from vmss_terminate.params import number_range, option

Progress = Callable[[int, int], None]
"""progress(done, total): instances upgraded (or current) so far."""

MANUAL = "manual"  # we send manualupgrade
PLATFORM = "platform"  # Automatic / Rolling: Azure applies the model
SKIPPED = "skipped"  # --no-upgrade
UNAVAILABLE = "unavailable"  # no per-instance model information (Flexible without VM list)
NOT_NEEDED = "not-needed"  # only the scheduled-events policy changes: it is not part of the VM model
NOT_NEEDED_NOTE = ("the scheduled-events policy is a scale-set property, not part of the VM model: it applies "
                   "without bringing instances to the latest model, so none are upgraded")

_BATCH = re.compile(r"^([0-9]{1,9})(%?)\Z", re.ASCII)  # ASCII digits, bounded; no spaces


AUTO = "auto"


@dataclass(frozen=True)
class BatchSize:
    """`--batch-size`: a count (`5`), a share of all instances (`20%`), never below 1, or `auto`
    (value 0): what the set's upgrade policy allows -- its
    `rollingUpgradePolicy.maxBatchInstancePercent` when it declares one, else every instance in one
    manualupgrade call, as `az vmss update-instances --instance-ids '*'` sends it (a Manual policy
    sets no bound of its own)."""

    value: int
    percent: bool = True

    @classmethod
    def parse(cls, text: Any) -> "BatchSize":
        if str(text).strip().lower() == AUTO:
            return AUTO_BATCH
        match = _BATCH.match(str(text))
        if not match:
            raise InvalidValue("batch_size", str(text), "use auto, a count (5) or a percentage (20%)")
        value, percent = int(match.group(1)), bool(match.group(2))
        if value < 1 or (percent and value > 100):
            raise InvalidValue("batch_size", str(text), "must be 1..100%, a count >= 1 or auto")
        return cls(value, percent)

    @property
    def auto(self) -> bool:
        return self.value == 0

    def for_total(self, total_instances: int, policy_percent: Optional[int] = None) -> int:
        """Instances per call for a set of `total_instances`; `policy_percent` is the set's
        maxBatchInstancePercent (None: not declared), read only by `auto`."""
        if self.auto:
            if policy_percent is None:
                return max(1, total_instances)
            return max(1, math.floor(total_instances * policy_percent / 100))
        if not self.percent:
            return self.value
        return max(1, math.floor(total_instances * self.value / 100))

    def __str__(self) -> str:
        if self.auto:
            return AUTO
        return f"{self.value}%" if self.percent else str(self.value)


AUTO_BATCH = BatchSize(0, True)
DEFAULT_BATCH = AUTO_BATCH


@dataclass(frozen=True)
class UpgradeOptions:
    """How (and whether) to upgrade after a change. `wait_timeout` / `poll_interval` are seconds
    on `clock`'s scale. `wait_timeout` bounds every wait for an Azure operation (the PATCH's, each
    manualupgrade batch's) and, with `wait` (Automatic/Rolling policies), the wait for instances;
    `poll_interval` is that instance-list wait's interval.

    Each field is also the command-line option of `enable`, `disable`, `retime` (all five), `upgrade`
    (all but `--no-upgrade`) and `plan` (`--batch-size`), declared once here (`vmss_terminate/params.py`)."""

    upgrade: bool = option(True, flags=("--no-upgrade",), help="Change the model only.")
    batch_size: BatchSize = option(
        DEFAULT_BATCH, parse=BatchSize.parse, show_default=True,
        help="Manual policy: instances per manualupgrade call (count or % of all instances); auto: the set's "
             "rollingUpgradePolicy.maxBatchInstancePercent, else all in one call.")
    wait: bool = option(False, help="Automatic/Rolling policy: wait until every instance is current.")
    wait_timeout: float = option(
        DEFAULT_TIMEOUT, parse=number_range("wait-timeout", 0), metavar="S", show_default=True,
        help="Seconds each wait may last: for an Azure operation (the PATCH's, each manualupgrade batch's) and, "
             "with --wait, for every instance to be current; past it, exit 1 naming what still runs.")
    poll_interval: float = option(
        10.0, parse=number_range("poll-interval", 0.01), metavar="S", show_default=True,
        help="Seconds between instance-list polls with --wait.")

    def __post_init__(self) -> None:
        if self.wait_timeout < 0:
            raise InvalidValue("wait_timeout", self.wait_timeout, "must be >= 0 seconds")
        if self.poll_interval <= 0:
            raise InvalidValue("poll_interval", self.poll_interval, "must be > 0 seconds")


@dataclass
class UpgradePlan:
    """What an upgrade would do now; shared by plan, --dry-run and the real run."""

    mode: str
    upgrade_policy: str
    total: int
    stale: List[str]
    batch_size: int
    note: Optional[str] = None

    @property
    def batches(self) -> List[List[str]]:
        size = max(1, self.batch_size)
        return [self.stale[i : i + size] for i in range(0, len(self.stale), size)]

    @property
    def writes(self) -> int:
        """manualupgrade POSTs this plan sends."""
        return len(self.batches) if self.mode == MANUAL else 0

    def describe(self) -> str:
        if self.mode == NOT_NEEDED:
            return f"upgrade: not needed ({self.note or NOT_NEEDED_NOTE})"
        if self.mode == SKIPPED:
            return f"upgrade skipped (--no-upgrade); {len(self.stale)} of {self.total} instances not on the latest model"
        if self.mode == UNAVAILABLE:
            return f"upgrade: {self.note or 'per-instance model information not available'}"
        if not self.stale:
            return f"all {self.total} instances on the latest model; nothing to upgrade"
        if self.mode == MANUAL:
            return (
                f"manualupgrade {len(self.stale)} of {self.total} instances in {len(self.batches)} "
                f"batch(es) of up to {self.batch_size}"
            )
        return (
            f"upgrade policy {self.upgrade_policy}: Azure applies the model to {len(self.stale)} of "
            f"{self.total} instances itself"
        )

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data["batches"] = len(self.batches)
        data["writes"] = self.writes
        return data


def make_plan(
    upgrade_policy: str,
    instances: Optional[Sequence[InstanceState]],
    options: UpgradeOptions,
    *,
    model_changes: bool = False,
    unavailable_note: Optional[str] = None,
    members: Sequence[str] = (),
    policy_batch_percent: Optional[int] = None,
) -> UpgradePlan:
    """Plan from the current inventory. `model_changes`: a PATCH is about to make (or has just made)
    every instance stale.

    `instances` None: the API reports no per-instance model (Flexible); `members` are the VM names.
    Their model is unknown, so only a change we make (or an explicit `upgrade`, which passes
    `model_changes`) is known to leave them all stale; then a Manual policy upgrades them all.
    Otherwise "unavailable" with a note that says so, never a silent "nothing to do".
    `policy_batch_percent`: the set's maxBatchInstancePercent, which sizes an `auto` batch.
    """
    if instances is None:
        return _plan_without_model_info(upgrade_policy, list(members), options, model_changes, unavailable_note,
                                        policy_batch_percent)
    total = len(instances)
    if model_changes:
        stale = [i.instance_id for i in instances]
    else:
        # one meaning everywhere (fleet audit, status, plan, upgrade, enable): an instance that does not
        # report latestModelApplied is not known to be current, so it is upgraded (manualupgrade of a
        # current one changes nothing); calling it current left `plan --detailed-exitcode` at 0
        stale = [i.instance_id for i in instances if i.latest_model_applied is not True]
    size = options.batch_size.for_total(total, policy_batch_percent)
    if not options.upgrade:
        mode = SKIPPED
    elif upgrade_policy.lower() == "manual":
        mode = MANUAL
    else:
        mode = PLATFORM
    unknown = sum(1 for i in instances if i.latest_model_applied is None)
    note = (f"{unknown} instance(s) do not report latestModelApplied: counted stale (not known to be current)"
            if unknown else None)
    return UpgradePlan(mode, upgrade_policy, total, stale, size, note)


def _plan_without_model_info(upgrade_policy: str, members: List[str], options: UpgradeOptions, all_stale: bool,
                             note: Optional[str], policy_batch_percent: Optional[int]) -> UpgradePlan:
    total, size = len(members), options.batch_size.for_total(len(members), policy_batch_percent)
    note = note or "per-instance model information not available"
    if not members:
        return UpgradePlan(UNAVAILABLE, upgrade_policy, 0, [], 0, note)
    if not options.upgrade:
        return UpgradePlan(SKIPPED, upgrade_policy, total, members if all_stale else [], size, note)
    if upgrade_policy.lower() != "manual":
        return UpgradePlan(UNAVAILABLE, upgrade_policy, total, [], 0,
                           f"{note}; upgrade policy {upgrade_policy}: Azure applies the model itself, "
                           "and per-member progress cannot be followed here")
    if all_stale:
        return UpgradePlan(MANUAL, upgrade_policy, total, members, size,
                           f"{note}; all {total} member VM(s) are upgraded, since which of them run the "
                           "latest model is not reported")
    return UpgradePlan(UNAVAILABLE, upgrade_policy, total, [], 0,
                       f"{note}; which members run the latest model is unknown: `vmss-terminate upgrade` "
                       f"upgrades all {total}")


@dataclass
class UpgradeResult:
    mode: str
    upgrade_policy: str
    total: int
    upgraded: List[str] = field(default_factory=list)
    remaining: List[str] = field(default_factory=list)
    batches_done: int = 0
    batch_size: int = 0
    waited: bool = False
    complete: bool = True
    error: Optional[str] = None
    note: Optional[str] = None
    in_flight: List[str] = field(default_factory=list)
    """A batch sent when the run was interrupted or its wait ended: Azure may still complete it
    (counted as remaining)."""
    still_stale: List[str] = field(default_factory=list)
    """Instances Azure reported as upgraded that still run the old model when read back."""
    stopped_by: Optional[str] = None
    """"Ctrl-C" or "SIGTERM" when a stop signal ended the run."""
    exit_code: int = field(default=0, repr=False)

    def describe(self) -> str:
        if self.mode == MANUAL and not self.upgraded and not self.remaining:
            return f"all {self.total} instances on the latest model; nothing to upgrade"
        if self.mode == MANUAL:
            text = f"upgraded {len(self.upgraded)} instance(s) in {self.batches_done} batch(es)"
            if self.remaining:
                text += f"; {len(self.remaining)} remaining"
            if self.in_flight and self.stopped_by:
                text += f" ({len(self.in_flight)} of them in flight when {self.stopped_by} stopped the run)"
            elif self.in_flight:
                text += f" ({len(self.in_flight)} of them still being upgraded by Azure when the wait ended)"
            if self.still_stale:
                text += (f"; {len(self.still_stale)} reported upgraded but still on the old model: "
                         f"{', '.join(self.still_stale[:20])}{' ...' if len(self.still_stale) > 20 else ''}")
            return text
        if self.mode == PLATFORM:
            if self.waited and self.complete:
                return f"all {self.total} instances on the latest model (applied by Azure, policy {self.upgrade_policy})"
            if self.waited:  # --wait ran out: say so, do not suggest --wait again
                return f"upgrade policy {self.upgrade_policy}: Azure applies the model; {self.error}"
            if self.remaining:
                return (
                    f"upgrade policy {self.upgrade_policy}: Azure applies the model; {len(self.remaining)} of "
                    f"{self.total} instances not yet current (use --wait to wait for them)"
                )
            return f"all {self.total} instances on the latest model"
        if self.mode == NOT_NEEDED:
            return f"upgrade: not needed ({self.note or NOT_NEEDED_NOTE})"
        if self.mode == SKIPPED:
            text = f"upgrade skipped (--no-upgrade); {len(self.remaining)} instance(s) not on the latest model"
            if self.upgrade_policy.lower() != "manual":
                text += f" (policy {self.upgrade_policy}: Azure applies the model itself)"
            return text
        return f"upgrade: {self.note or 'not available'}"

    def to_dict(self) -> Dict[str, Any]:
        data = asdict(self)
        data.pop("exit_code")
        return data


class UpgradeIncomplete(AzureError):
    """Some instances were not upgraded. Carries the partial result so the CLI can still print it;
    exit 1, or 130/143 when Ctrl-C/SIGTERM stopped the run."""

    def __init__(self, message: str, result: UpgradeResult) -> None:
        super().__init__(message)
        self.result = result
        if result.exit_code:
            self.exit_code, self.kind = result.exit_code, "interrupted"

    def details(self) -> Dict[str, Any]:
        return {"upgrade": self.result.to_dict()}


def _stopped(result: UpgradeResult, exc: KeyboardInterrupt, doing: str) -> UpgradeResult:
    result.complete = False
    result.stopped_by = interrupt_name(exc)
    result.exit_code = interrupt_exit_code(exc)
    result.error = f"interrupted by {result.stopped_by} {doing}"
    return result


def run_manual(
    upgrade_one_batch: Callable[[List[str]], None],
    plan: UpgradePlan,
    progress: Optional[Progress] = None,
) -> UpgradeResult:
    """Send the plan's batches in order, awaiting each; stop at the first failure (error recorded)."""
    result = UpgradeResult(MANUAL, plan.upgrade_policy, plan.total, batch_size=plan.batch_size)
    result.remaining = list(plan.stale)
    total = len(plan.stale)
    if progress and total:
        progress(0, total)
    for number, batch in enumerate(plan.batches, start=1):
        try:
            upgrade_one_batch(batch)
        except OperationStillRunning as exc:  # the wait ended; Azure may still complete the batch
            result.complete = False
            result.in_flight = list(batch)
            result.error = str(exc)
            return result
        except AzureError as exc:
            result.complete = False
            result.error = str(exc)
            return result
        except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM raised as StopSignal by the CLI
            result.in_flight = list(batch)
            return _stopped(result, exc, f"while batch {number} ({len(batch)} instance(s)) was in flight; "
                                         "Azure may still complete it")
        result.upgraded.extend(batch)
        result.remaining = result.remaining[len(batch) :]
        result.batches_done += 1
        if progress:
            progress(len(result.upgraded), total)
    return result


def wait_until_current(
    list_instances: Callable[[], List[InstanceState]],
    plan: UpgradePlan,
    *,
    wait_timeout: float,
    poll_interval: float,
    clock: Clock = SYSTEM_CLOCK,
    progress: Optional[Progress] = None,
) -> UpgradeResult:
    """Poll the instance list until every instance reports latestModelApplied, or `wait_timeout` seconds pass."""
    result = UpgradeResult(PLATFORM, plan.upgrade_policy, plan.total, waited=True, remaining=list(plan.stale))
    deadline = clock.now() + wait_timeout
    try:
        return _wait(list_instances, result, deadline, wait_timeout, poll_interval, clock, progress)
    except KeyboardInterrupt as exc:
        return _stopped(result, exc, "while waiting; Azure keeps applying the model")


def _wait(list_instances: Callable[[], List[InstanceState]], result: UpgradeResult, deadline: float, wait_timeout: float,
          poll_interval: float, clock: Clock, progress: Optional[Progress]) -> UpgradeResult:
    while True:
        instances = list_instances()
        stale = [i.instance_id for i in instances if i.latest_model_applied is not True]
        result.total = len(instances)
        result.remaining = stale
        if progress:
            progress(len(instances) - len(stale), len(instances))
        if not stale:
            result.complete = True
            return result
        if clock.now() >= deadline:
            result.complete = False
            result.error = (
                f"{len(stale)} of {len(instances)} instances still not on the latest model after {wait_timeout:g}s"
            )
            return result
        clock.sleep(min(poll_interval, max(0.0, deadline - clock.now())))
