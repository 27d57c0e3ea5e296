"""What `fleet audit` and `fleet rollout` take besides the scope and the connection, declared once.

Each field that is a command-line option is declared with `option(default, help=...)`
(`vmss_terminate/params.py`); `commands/fleet.py` builds the click options from these fields and
hands the command one `AuditOptions` / `RolloutOptions`, and the Python API takes the same object
(`rollout(scope, RolloutOptions(timeout=10))`, or its fields as keywords). Adding an option is one
field here (then regenerate docs/cli-reference.md). Values are normalised and checked on
construction, so the CLI and the Python API refuse the same input with the same message.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Optional, Tuple, Union

from vmss_terminate.control.events_policy import KINDS, PolicyChange
from vmss_terminate.control.upgrade import DEFAULT_BATCH, BatchSize, UpgradeOptions
from vmss_terminate.errors import UsageError
from vmss_terminate.fleet.findings import FINDINGS, IGNORABLE, SKIPPED_BY_DEFAULT, check_ignorable
from vmss_terminate.params import number_range, option, whole_number
from vmss_terminate.timeout import parse_timeout

DEFAULT_CONCURRENCY = 64
"""Scale sets worked on at once by default: a small estate (up to 64 sets) runs in one wave; the
per-subscription throttle, not the worker count, is what keeps Azure's quotas (docs/benchmarks.md)."""
MAX_CONCURRENCY = 256
_concurrency = whole_number("concurrency", 1, MAX_CONCURRENCY)


def _concurrency_option() -> Any:
    return option(DEFAULT_CONCURRENCY, parse=_concurrency, show_default=True,
                  help="Scale sets worked on at once (each subscription is throttled on its own).")


def _set(obj: Any, name: str, value: Any) -> None:
    object.__setattr__(obj, name, value)  # frozen dataclasses normalise in __post_init__


@dataclass(frozen=True)
class AuditOptions:
    """`fleet audit`: the timeout sets should have (None: any enabled timeout complies), and how
    many scale sets are read at once."""

    concurrency: int = _concurrency_option()
    timeout: Optional[int] = option(
        parse=parse_timeout,
        help="The notBeforeTimeout sets should have (5..15 minutes); without it any enabled timeout complies.")
    ignore_findings: Iterable[str] = option(
        (), flags=("--ignore-finding",), multiple=True, metavar="CODE", choices=IGNORABLE,
        help="With --detailed-exitcode: accept this finding (repeatable), e.g. spot, aks-managed or "
             "stale-unknown: a set with an ignored spot/aks-managed finding does not count, and an ignored "
             "finding no longer makes a set fail the gate. 'unreadable' cannot be ignored (exit 1).")

    require_event_grid: bool = option(
        False, help="Sets that do not publish their scheduled events to Event Grid and Resource Graph "
                    "(scheduledEventsPolicy, preview) get the finding event-grid-off and are non-compliant.")
    require_auto_approve: Iterable[str] = option(
        (), multiple=True, metavar="KIND", choices=tuple(KINDS),
        help="Sets on which Azure does not approve this kind of event by itself (repeatable: user-reboot, "
             "user-redeploy, all-instances-down) get the finding auto-approve-off and are non-compliant.")

    def __post_init__(self) -> None:
        _set(self, "require_auto_approve", tuple(PolicyChange(auto_approve=tuple(self.require_auto_approve))
                                                 .auto_approve))
        if self.timeout is not None:
            _set(self, "timeout", parse_timeout(self.timeout))
        _set(self, "ignore_findings", tuple(sorted(check_ignorable(self.ignore_findings))))
        if self.concurrency < 1:
            raise UsageError(f"invalid concurrency {self.concurrency}: must be >= 1")


@dataclass(frozen=True)
class RolloutOptions:
    """`fleet rollout`: the timeout to set and how to roll it out. `wait_timeout`: seconds an
    Automatic / Rolling set is waited for until Azure applied the model."""

    concurrency: int = _concurrency_option()
    timeout: Union[int, str, None] = option(
        parse=parse_timeout, required=True, help="notBeforeTimeout to set: 5..15 minutes (10, 10m, PT10M).")
    batch_size: Union[BatchSize, str, int] = option(
        DEFAULT_BATCH, parse=BatchSize.parse, show_default=True,
        help="Manual policy: instances per manualupgrade call (count or % of a set's instances); auto: each "
             "set's rollingUpgradePolicy.maxBatchInstancePercent, else all in one call.")
    dry_run: bool = option(False, help="Print the plan; write nothing.")
    journal: Union[str, Path, None] = option(
        kind="file", metavar="FILE", help="Record per-set progress here; re-run with the same file to resume.")
    include_skipped: Iterable[str] = option(
        (), multiple=True, metavar="CODE", choices=SKIPPED_BY_DEFAULT,
        help="Also change sets skipped by default for this finding (repeatable).")
    wait_timeout: float = option(
        UpgradeOptions.wait_timeout, parse=number_range("wait-timeout", 0), metavar="S", show_default=True,
        help="Seconds each wait may last: for an Azure operation (a set's PATCH, each manualupgrade batch's) "
             "and for an Automatic / Rolling set until Azure applied the model; past it that set fails, "
             "naming what still runs.")
    policy: Optional[PolicyChange] = None
    """The scheduled-events policy to roll out with the timeout (the CLI's --event-grid, --auto-approve, ...
    options, declared once on `PolicyChange`; its `force` skips the preview-feature check, once per
    subscription); None leaves every set's policy alone."""

    def __post_init__(self) -> None:
        if self.policy is not None and not isinstance(self.policy, PolicyChange):
            raise UsageError(f"policy must be a PolicyChange, not {type(self.policy).__name__}")
        if self.policy is not None and self.policy.empty:
            _set(self, "policy", None)
        if self.timeout is None:
            raise UsageError("rollout needs a timeout (5..15 minutes, e.g. 10, '10m' or 'PT10M')",
                             cli_message="rollout needs --timeout (5..15 minutes, e.g. 10m or PT10M)")
        _set(self, "timeout", parse_timeout(self.timeout))
        if not isinstance(self.batch_size, BatchSize):
            _set(self, "batch_size", BatchSize.parse(self.batch_size))
        include: Tuple[str, ...] = tuple(self.include_skipped)
        for code in include:
            if code not in FINDINGS:
                raise UsageError(f"invalid --include-skipped {code!r}: one of {', '.join(SKIPPED_BY_DEFAULT)}")
        _set(self, "include_skipped", include)
        if self.concurrency < 1:
            raise UsageError(f"invalid --concurrency {self.concurrency}: must be >= 1")
        _set(self, "wait_timeout", number_range("wait-timeout", 0)(self.wait_timeout))

    @property
    def minutes(self) -> int:
        """The timeout, parsed (construction has checked it)."""
        assert isinstance(self.timeout, int)
        return self.timeout

    @property
    def batch(self) -> BatchSize:
        """The batch size, parsed (construction has checked it)."""
        assert isinstance(self.batch_size, BatchSize)
        return self.batch_size


def with_fields(cls: Any, options: Any, fields: Any) -> Any:
    """`options` (or a default `cls`) with `fields` (keyword arguments of the Python API) applied:
    `rollout(scope, timeout=10)` is `rollout(scope, RolloutOptions(timeout=10))`."""
    if options is None:
        return cls(**fields)
    return dataclasses.replace(options, **fields) if fields else options
