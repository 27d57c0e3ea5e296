"""The control-plane Python API; every `vmss-terminate` control command is a thin wrapper over one
of these functions.

    from vmss_terminate.control import Connection, enable
    result = enable("my-rg", "my-vmss", 10, connection=Connection(subscription_id="..."))
    print(result.to_dict())

Guarantees:

* input (timeout, api-version, endpoint, subscription, batch size) is validated before any request;
* a change is one PATCH carrying only `scheduledEventsProfile` and/or the top-level
  `scheduledEventsPolicy` (the bytes of `control.body.patch_bytes`; each only when it differs),
  never a PUT, and only when the live state differs from the desired one ("no change" otherwise,
  still upgrading stale instances: the goal is the desired state);
* a change of the scheduled-events policy alone upgrades nothing: the policy is not part of the VM
  model (docs/control-plane.md); turning on Event Grid publishing first checks that the subscription
  has the preview feature Microsoft.Compute/SendScheduledEventsPolicy registered (`policy.force` skips it);
* the model is read back after the PATCH; a write Azure accepted but did not apply is an error;
* an upgrade failure after a successful PATCH says so: "profile changed; upgrade incomplete ...".
"""

from __future__ import annotations

import copy
from contextlib import contextmanager
from dataclasses import replace
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Sequence, Set, Tuple, Union

from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.control import body
from vmss_terminate.control.arm_errors import ArmRequestError
from vmss_terminate.control.commandline import scale_set_command
from vmss_terminate.control.connection import Connection
from vmss_terminate.control.events_policy import (
    FEATURE_NAME,
    FEATURE_NAMESPACE,
    PolicyChange,
    PolicyState,
    parse_policy,
    register_command,
)
from vmss_terminate.control.operations import DEFAULT_WAIT, OperationWait
from vmss_terminate.control.profile import (
    InstanceState,
    ProfileState,
    ScaleSetState,
    etag_of,
    parse_instance,
    parse_profile,
    parse_scale_set,
)
from vmss_terminate.control.results import ChangeResult, Plan, StatusResult
from vmss_terminate.control.scaleset import ComputeClient, ConcurrentWrite, PatchUnconfirmed, ScaleSetClient
from vmss_terminate.control.upgrade import (
    MANUAL,
    NOT_NEEDED,
    PLATFORM,
    SKIPPED,
    UNAVAILABLE,
    Progress,
    UpgradeIncomplete,
    UpgradeOptions,
    UpgradePlan,
    UpgradeResult,
    make_plan,
    run_manual,
    wait_until_current,
)
from vmss_terminate.errors import AzureError, Interrupted, UsageError, VmssTerminateError, interrupt_name
from vmss_terminate.timeout import parse_timeout

Target = Union[Connection, ComputeClient]
"""Where a function reaches ARM: a `Connection` (resolved once for the call), or a subscription's
`ComputeClient`, which a caller working through many scale sets reuses (one SDK client and
connection pool per subscription, as `fleet` does)."""

ENABLE, DISABLE, RETIME = "enable", "disable", "retime"
ACTIONS = (ENABLE, DISABLE, RETIME)
DEFAULT_OPTIONS = UpgradeOptions()  # frozen: safe as a shared default


def status(resource_group: str, name: str, *, connection: Target) -> StatusResult:
    """Orchestration mode, upgrade policy, the terminate-notification profile and, per instance,
    whether it runs the latest model (Flexible: when the API offers it, else a note)."""
    with ScaleSetClient(connection, resource_group, name) as client:
        state = parse_scale_set(client.get())
        instances, note, _ = _inventory(client, state)
        return StatusResult(
            **client.target,
            resource_id=state.resource_id,
            orchestration_mode=state.orchestration_mode,
            upgrade_policy=state.upgrade_mode,
            profile=state.profile,
            instances=instances,
            instances_note=note,
            api_version=client.resolved.effective_api_version(),
            notes=state.notes,
            events_policy=state.events_policy,
        )


def plan(
    resource_group: str,
    name: str,
    timeout: Optional[Union[int, str]] = None,
    *,
    action: str = ENABLE,
    connection: Target,
    options: UpgradeOptions = DEFAULT_OPTIONS,
    policy: Optional[PolicyChange] = None,
) -> Plan:
    """What `action` (enable by default) would change now -- profile, scheduled-events policy and
    instances -- without writing."""
    minutes = _check_inputs(action, timeout, policy)
    with ScaleSetClient(connection, resource_group, name) as client:
        _check_policy_api(client, policy)
        return _prepare(client, action, minutes, options, policy, check_feature=True)[0]


def enable(resource_group: str, name: str, timeout: Union[int, str, None] = None, *, connection: Target,
           options: UpgradeOptions = DEFAULT_OPTIONS, dry_run: bool = False, progress: Optional[Progress] = None,
           clock: Clock = SYSTEM_CLOCK, no_wait: bool = False, policy: Optional[PolicyChange] = None) -> ChangeResult:
    """Enable terminate notifications with `timeout` (5..15 minutes) and upgrade instances; with
    `policy`, change the scheduled-events policy in the same PATCH. Without `timeout` only the
    policy changes (the set must have terminate notification enabled already), and no instance
    is upgraded. `policy.force` skips the preview-feature check of `policy.event_grid=True`."""
    return _change(ENABLE, resource_group, name, timeout, connection, options,
                   _Run(dry_run, progress, clock, no_wait), policy)


def disable(resource_group: str, name: str, *, connection: Target, options: UpgradeOptions = DEFAULT_OPTIONS,
            dry_run: bool = False, progress: Optional[Progress] = None, clock: Clock = SYSTEM_CLOCK,
            no_wait: bool = False, policy: Optional[PolicyChange] = None) -> ChangeResult:
    """Disable terminate notifications (`"enable": false`) and upgrade instances; the
    scheduled-events policy is left alone unless `policy` asks for a change (same PATCH)."""
    return _change(DISABLE, resource_group, name, None, connection, options,
                   _Run(dry_run, progress, clock, no_wait), policy)


def retime(resource_group: str, name: str, timeout: Union[int, str], *, connection: Target,
           options: UpgradeOptions = DEFAULT_OPTIONS, dry_run: bool = False, progress: Optional[Progress] = None,
           clock: Clock = SYSTEM_CLOCK, no_wait: bool = False) -> ChangeResult:
    """Change the timeout of an enabled scale set (refused when notifications are not enabled)."""
    return _change(RETIME, resource_group, name, timeout, connection, options,
                   _Run(dry_run, progress, clock, no_wait))


def upgrade(
    resource_group: str,
    name: str,
    *,
    connection: Target,
    options: UpgradeOptions = DEFAULT_OPTIONS,
    progress: Optional[Progress] = None,
    clock: Clock = SYSTEM_CLOCK,
) -> UpgradeResult:
    """Bring stale instances to the latest model (Manual: manualupgrade in batches; Automatic /
    Rolling: report, or wait with `options.wait`). Safe to re-run: only stale instances are sent."""
    with ScaleSetClient(connection, resource_group, name) as client:
        state = parse_scale_set(client.get())
        found = _inventory(client, state)
        # an explicit upgrade of members whose model is unknown (Flexible) upgrades them all
        the_plan = make_plan(state.upgrade_mode, found.instances, options, unavailable_note=found.note,
                             members=found.members, model_changes=found.instances is None,
                             policy_batch_percent=state.max_batch_percent)
        return _upgrade(client, state, the_plan, options, progress, clock, profile_changed=False)


# --- shared steps -----------------------------------------------------------------------------


def _check_inputs(action: str, timeout: Optional[Union[int, str]], policy: Optional[PolicyChange] = None
                  ) -> Optional[int]:
    if action not in ACTIONS:
        raise UsageError(f"unknown action {action!r}: choose one of {', '.join(ACTIONS)}")
    if policy is not None and not isinstance(policy, PolicyChange):
        raise UsageError(f"policy must be a PolicyChange, not {type(policy).__name__}")
    if policy is not None and action == RETIME:
        raise UsageError("retime changes the timeout only: change the scheduled-events policy with enable",
                         cli_message="retime changes the timeout only: pass the policy options to enable")
    if action == DISABLE:
        return None
    if timeout is None:
        if action == ENABLE and policy is not None and not policy.empty:
            return None  # the policy alone (on a set that has terminate notification already)
        raise UsageError(f"{action} needs a timeout (5..15 minutes, e.g. 10, '10m' or 'PT10M')",
                         cli_message=f"{action} needs --timeout (5..15 minutes, e.g. 10m or PT10M)"
                                     + (" or a scheduled-events policy option (--event-grid, --auto-approve KIND, "
                                        "...)" if action == ENABLE else ""))
    return parse_timeout(timeout)


def _check_policy_api(client: ScaleSetClient, policy: Optional[PolicyChange]) -> None:
    """Before any request: a pinned api-version too old for a policy option is bad input (exit 2)."""
    if policy is not None:
        policy.check_api_version(client.resolved.api_version)


def _desired(action: str, before: ProfileState, minutes: Optional[int], client: ScaleSetClient,
             policy: Optional[PolicyChange] = None) -> Tuple[ProfileState, bool, Optional[bool]]:
    """(desired profile, whether it changes, the `enable` the PATCH writes: None leaves it out)."""
    if action == DISABLE:
        return ProfileState.desired(False, None), not before.is_off, False
    if minutes is None:  # enable with the policy options alone
        if not before.enabled:
            again = _command(client, "enable", "--timeout", "10m", *(policy.args() if policy else []))
            raise VmssTerminateError(
                f"enable without --timeout changes only the scheduled-events policy of a set with terminate "
                f"notification enabled; terminate notification on {client.resource}: {before.describe()}; nothing "
                f"was changed: enable it in the same PATCH with `{again}` (any timeout of 5..15 minutes)",
            )
        return before, False, None
    if action == RETIME and not before.enabled:
        raise VmssTerminateError(
            f"retime: terminate notifications are not enabled on {client.resource} ({before.describe()}); "
            f"use `{_command(client, 'enable', '--timeout', f'{minutes}m')}` instead"
        )
    return ProfileState.desired(True, minutes), not before.is_enabled_with(minutes), True


def _prepare(
    client: ScaleSetClient, action: str, minutes: Optional[int], options: UpgradeOptions,
    policy: Optional[PolicyChange] = None, *, applying: bool = False, check_feature: bool = False,
) -> Tuple[Plan, ScaleSetState, bytes]:
    """Read live state and compute the plan: the code `plan` and `--dry-run` share with the real run.

    `applying`: when a PATCH will follow and instances will be upgraded, the instance list is read
    after the PATCH instead (it is what the upgrade needs), saving one full paged listing.
    `check_feature`: read (and show) the preview feature's state when the plan turns on Event Grid.
    """
    state = parse_scale_set(client.get())
    desired, change, enable_value = _desired(action, state.profile, minutes, client, policy)
    policy_change = policy is not None and not policy.satisfied_by(state.events_policy)
    policy_desired = policy.applied_to(state.events_policy) if policy is not None else None
    payload = body.patch_bytes(enable_value if change else None, minutes if change else None,
                               policy.fragment() if policy is not None and policy_change else None)
    writes = change or policy_change
    if action == ENABLE and minutes is None:  # the policy alone: nothing to upgrade
        upgrade_plan = UpgradePlan(NOT_NEEDED, state.upgrade_mode, 0, [], 0)
    elif applying and change and options.upgrade:
        upgrade_plan = make_plan(state.upgrade_mode, [], options)  # replaced by the caller after the PATCH
    else:
        found = _inventory(client, state)
        upgrade_plan = make_plan(state.upgrade_mode, found.instances, options, model_changes=change,
                                 unavailable_note=found.note, members=found.members,
                                 policy_batch_percent=state.max_batch_percent)
    resolved = client.resolved
    request = (
        f"PATCH {resolved.base_url}{client.resource_path}?api-version={resolved.effective_api_version()}"
        if writes
        else None
    )
    feature = None
    if check_feature and policy is not None and policy_change and policy.enables_event_grid \
            and not state.events_policy.publishes:
        try:
            feature = client.compute.feature_state(FEATURE_NAMESPACE, FEATURE_NAME)
        except AzureError as exc:  # a plan still shows what it knows (the real run stops, or --force)
            feature = f"unreadable ({exc})"
    result = Plan(
        action=action,
        **client.target,
        before=state.profile,
        desired=desired,
        profile_change=change,
        request=request,
        patch_body=payload.decode("utf-8") if writes else None,
        upgrade=upgrade_plan,
        policy_before=state.events_policy,
        policy_desired=policy_desired,
        policy_change=policy_change,
        feature_state=feature,
    )
    return result, state, payload


def _check_feature(client: ScaleSetClient, the_plan: Plan, policy: Optional[PolicyChange]) -> None:
    """Before the PATCH that turns on Event Grid and Resource Graph publishing: the subscription must
    have the preview feature registered, else exit 1 with the `az feature register` line to run."""
    if policy is None or policy.force or not the_plan.policy_change or not policy.enables_event_grid:
        return
    if the_plan.policy_before is not None and the_plan.policy_before.publishes:
        return
    try:
        state = client.compute.feature_state(FEATURE_NAMESPACE, FEATURE_NAME)
    except AzureError as exc:
        raise AzureError(f"{exc}; nothing was changed (--force skips this check)") from None
    the_plan.feature_state = state
    if state.lower() == "registered":
        return
    subscription = client.resolved.subscription_id
    raise AzureError(
        f"publishing scheduled events to Event Grid and Resource Graph is a preview that needs the feature "
        f"{FEATURE_NAMESPACE}/{FEATURE_NAME} registered in subscription {subscription}, which is {state}; nothing "
        f"was changed. Register it (once per subscription) with: {register_command(subscription)} -- then, once "
        f"`az feature show --namespace {FEATURE_NAMESPACE} --name {FEATURE_NAME} --subscription {subscription}` "
        f"says Registered, `az provider register --namespace {FEATURE_NAMESPACE} --subscription {subscription}`; "
        f"or pass --force to skip this check"
    )


class _Run(NamedTuple):
    """How a change runs (the change functions' keywords, passed on as one)."""

    dry_run: bool
    progress: Optional[Progress]
    clock: Clock
    no_wait: bool


def _change(
    action: str,
    resource_group: str,
    name: str,
    timeout: Optional[Union[int, str]],
    connection: Target,
    options: UpgradeOptions,
    run: "_Run",
    policy: Optional[PolicyChange] = None,
) -> ChangeResult:
    """`run.no_wait` (az's `--no-wait`): return once ARM accepted the PATCH; no read-back, no upgrade."""
    dry_run, progress, clock, no_wait = run
    minutes = _check_inputs(action, timeout, policy)
    if no_wait and options.wait:
        raise UsageError("no_wait and options.wait contradict each other", cli_message="--no-wait and --wait "
                         "contradict each other: pass one")
    _check_no_ignored_options(options, dry_run, no_wait)
    with ScaleSetClient(connection, resource_group, name) as client:
        _check_policy_api(client, policy)
        the_plan, state, payload = _prepare(client, action, minutes, options, policy,
                                            applying=not dry_run and not no_wait, check_feature=dry_run)
        if dry_run:
            return ChangeResult(action, changed=False, dry_run=True, plan=the_plan)
        writes = the_plan.profile_change or the_plan.policy_change
        if writes:
            _check_feature(client, the_plan, policy)
        after, policy_after = state.profile, state.events_policy
        if no_wait:
            if writes:
                _patch_interruptible(client, payload, wait=False, action=action, if_match=state.etag)
            return ChangeResult(action, changed=writes, dry_run=False, plan=the_plan,
                                no_wait=True, follow_up=_follow_up(client) if writes else
                                f"`{_command(client, 'upgrade')}` brings instances still on an older model to it")
        if writes:
            written = _patch_interruptible(client, payload, wait=True, the_plan=the_plan, action=action,
                                           operation=OperationWait(options.wait_timeout, clock), if_match=state.etag)
            with _after_patch(client, action, the_plan, "no instances were upgraded", options.upgrade):
                read = client.get()
            after, policy_after = parse_profile(read), parse_policy(read)
            # another etag than our PATCH's answer: someone wrote after us (not Azure ignoring our write)
            _check_applied(action, the_plan, after, policy_after, client,
                           overwritten=written is not None and etag_of(read) not in (None, written))
            if the_plan.profile_change and options.upgrade:  # the new model made instances stale: plan from the
                with _after_patch(client, action, the_plan, "no instances were upgraded", options.upgrade):
                    found = _inventory(client, state)               # list read now
                # instances reporting latestModelApplied show the change; members that do not
                # (Flexible) are all stale now, since the model just changed
                the_plan.upgrade = make_plan(state.upgrade_mode, found.instances, options, unavailable_note=found.note,
                                             members=found.members, model_changes=found.instances is None,
                                             policy_batch_percent=state.max_batch_percent)
        upgraded = _upgrade(
            client, state, the_plan.upgrade, options, progress, clock, profile_changed=writes
        )
        if writes or upgraded.upgraded or upgraded.waited:
            with _after_patch(client, action, the_plan if writes else None, _work_done(upgraded), False):
                read = client.get()
            after, policy_after = _still_as(client, action, the_plan, upgraded, read)
        return ChangeResult(
            action, changed=writes, dry_run=False, plan=the_plan, after=after, upgrade=upgraded,
            policy_after=policy_after,
        )


def _check_no_ignored_options(options: UpgradeOptions, dry_run: bool, no_wait: bool) -> None:
    """An option the rest of the command line makes meaningless is bad input, never silently ignored."""
    if dry_run and no_wait:
        raise UsageError("dry_run and no_wait contradict each other", cli_message="--dry-run writes nothing and "
                         "--no-wait returns once a write is accepted: pass one")
    if not options.upgrade and options.wait:
        raise UsageError("options.upgrade=False and options.wait contradict each other", cli_message="--wait waits "
                         "for the upgrade --no-upgrade skips: pass one")
    if not options.upgrade and options.batch_size != DEFAULT_OPTIONS.batch_size:
        raise UsageError("options.batch_size is meaningless with options.upgrade=False", cli_message="--batch-size "
                         "sizes the upgrade --no-upgrade skips: pass one")


def _command(client: ScaleSetClient, verb: str, *extra: str) -> str:
    """The command line that runs `verb` on this client's scale set, as printed (control/commandline.py)."""
    return scale_set_command(verb, client.resolved, client.resource_group, client.name, extra)


def _follow_up(client: ScaleSetClient) -> str:
    return (f"follow with `{_command(client, 'status')}` until the profile shows the change, then "
            f"`{_command(client, 'upgrade')}`")


def _patch_interruptible(client: ScaleSetClient, payload: bytes, *, wait: bool, the_plan: Optional[Plan] = None,
                         action: str = "", operation: OperationWait = DEFAULT_WAIT,
                         if_match: Optional[str] = None) -> Optional[str]:
    """Send the PATCH (with `If-Match: if_match` when the set reported an etag); say what is known
    when it cannot be confirmed or a stop signal interrupts it (either way the change may be applied:
    never report it as simply failed). Returns the etag of ARM's answer, when it carried one."""
    try:
        if not wait:
            client.patch_no_wait(payload, if_match)
            return None
        try:
            return client.patch(payload, operation, if_match)
        except ConcurrentWrite as exc:
            raise ConcurrentWrite(f"{action}: {exc}; nothing was written and no instances were upgraded by this "
                                  f"command; it now reads: {_reads_now(client)}; check `{_command(client, 'status')}` "
                                  "and re-run this command if it should still change") from None
        except PatchUnconfirmed as exc:
            applied = _reads_as(client, action, the_plan)
            state = ("applied (the model reads back as changed), but its completion could not be confirmed"
                     if applied else "accepted by ARM, but whether it is applied could not be confirmed")
            what = "profile change" if the_plan is None or the_plan.profile_change else "scheduled-events policy change"
            raise AzureError(f"{action}: the {what} was {state}: {exc}; no instances were upgraded; "
                             f"{_follow_up(client)}") from None
    except KeyboardInterrupt as exc:
        raise Interrupted(f"interrupted by {interrupt_name(exc)} while the PATCH of {client.resource} was in flight: "
                          f"Azure may still apply the change; no instances were upgraded; "
                          f"{_follow_up(client)}", exc) from None


@contextmanager
def _after_patch(client: ScaleSetClient, action: str, the_plan: Optional[Plan], done: str,
                 upgrade_next: bool) -> Iterator[None]:
    """A read failing after the PATCH was applied (or after instances were upgraded) says so --
    what changed, what was done, how to resume -- instead of only the read's own error; the
    error's class is kept (a fleet rollout stops starting sets on CredentialRejected)."""
    try:
        yield
    except (UpgradeIncomplete, ConcurrentWrite):
        raise
    except AzureError as exc:
        if the_plan is not None:
            what = "profile change" if the_plan.profile_change else "scheduled-events policy change"
            applied = f"the {what} was applied (ARM confirmed the PATCH)"
        else:
            applied = "nothing was written"
        resume = (f"resume with `{_command(client, 'upgrade')}`" if upgrade_next
                  else f"check with `{_command(client, 'status')}`")
        raise _said(exc, f"{action}: {applied} and {done}, then {exc}; {resume}") from None


def _said(exc: AzureError, message: str) -> AzureError:
    """`exc` again with `message`: same class and fields (an ArmRequestError's code and status)."""
    told = copy.copy(exc)
    told.args = (message,)
    told.cli_message = None
    return told


def _work_done(upgraded: UpgradeResult) -> str:
    if upgraded.upgraded:
        return f"{len(upgraded.upgraded)} instance(s) were upgraded"
    return "its instances were waited for" if upgraded.waited else "no instances were upgraded"


def _reads_now(client: ScaleSetClient) -> str:
    """Best effort: the profile as it reads now, said in words."""
    try:
        return parse_profile(client.get()).describe()
    except AzureError as exc:
        return f"(could not be read: {exc})"


def _still_as(client: ScaleSetClient, action: str, the_plan: Plan,
              upgraded: UpgradeResult, read: Dict[str, Any]) -> Tuple[ProfileState, PolicyState]:
    """The model re-read once the work is done (`read`), checked before claiming success: another
    writer (a `disable`, an `enable` with another timeout, a template deployment) may have changed
    it while this command upgraded instances -- then this is a failure naming what it reads now."""
    after, policy_after = parse_profile(read), parse_policy(read)
    # also when no profile PATCH was needed: the profile still has to read as the command's target
    check = the_plan if the_plan.profile_change else replace(the_plan, profile_change=True)
    problems = _differences(action, check, after, policy_after)
    if not problems:
        return after, policy_after
    work = (f"{len(upgraded.upgraded)} instance(s) were upgraded to the model of then"
            if upgraded.upgraded else "its instances were waited for")
    raise AzureError(f"{action}: {client.resource} was changed by another writer while this command worked on it: "
                     f"it {'; '.join(problems).replace('still reads', 'now reads')}; "
                     f"{'the PATCH was applied and ' if the_plan.profile_change or the_plan.policy_change else ''}"
                     f"{work}; check `{_command(client, 'status')}` and re-run this command if it should still change")


def _reads_as(client: ScaleSetClient, action: str, the_plan: Optional[Plan]) -> bool:
    """Best effort: does the model read back as the plan wanted now? (False when it cannot be read.)"""
    if the_plan is None:
        return False
    try:
        read = client.get()
    except AzureError:
        return False
    return not _differences(action, the_plan, parse_profile(read), parse_policy(read))


def _differences(action: str, the_plan: Plan, after: ProfileState, policy_after: PolicyState) -> List[str]:
    """What does not read back as the plan asked (one rule for both read-backs): [] when all does."""
    out = []
    if the_plan.profile_change:
        desired = the_plan.desired
        applied = after.is_off if action == DISABLE else after.is_enabled_with(desired.timeout_minutes or 0)
        if not applied:
            out.append(f"still reads: {after.describe()} (wanted: {desired.describe()})")
    wanted = the_plan.policy_desired
    if the_plan.policy_change and wanted is not None and not _policy_as(wanted, policy_after):
        out.append(f"scheduled-events policy still reads: {policy_after.describe()} (wanted: {wanted.describe()})")
    return out


def _policy_as(wanted: PolicyState, after: PolicyState) -> bool:
    if wanted.publishes != after.publishes:
        return False
    if wanted.events_api_version and after.events_api_version != wanted.events_api_version:
        return False
    return all(after.auto_approve.get(kind) is value for kind, value in wanted.auto_approve.items() if value is not None)


def _check_applied(action: str, the_plan: Plan, after: ProfileState, policy_after: PolicyState,
                   client: ScaleSetClient, overwritten: bool = False) -> None:
    """Read-back check: Azure has been seen to accept a re-enable after a disable and ignore it.
    `overwritten`: the set's etag moved past our PATCH's, so another writer changed it after us."""
    problems = _differences(action, the_plan, after, policy_after)
    if not problems:
        return
    if overwritten:
        raise AzureError(
            f"{action}: the PATCH was applied, but {client.resource} was changed again by another writer right "
            f"after it: it {'; '.join(problems).replace('still reads', 'now reads')}; no instances were upgraded; "
            f"check `{_command(client, 'status')}` and re-run this command if it should still change")
    hint = ""
    if the_plan.profile_change and any(p.startswith("still reads") for p in problems):
        hint = (" This is a known Azure behaviour when re-enabling after a disable (MicrosoftDocs/azure-docs#41434): "
                "apply the change together with another virtualMachineProfile change (e.g. in your template), then "
                f"check with `{_command(client, 'status')}`")
    else:
        hint = f" Check with `{_command(client, 'status')}`"
    raise AzureError(
        f"{action}: Azure accepted the PATCH but {client.resource} {'; '.join(problems)}; no instances were "
        f"upgraded.{hint}"
    )


class Inventory(NamedTuple):
    """Instances with latestModelApplied, or (Flexible) None, a note why, and the member VM names."""

    instances: Optional[List[InstanceState]]
    note: Optional[str] = None
    members: Sequence[str] = ()


def _inventory(client: ScaleSetClient, state: ScaleSetState) -> Inventory:
    """Instances with latestModelApplied. Flexible: the scale-set VM API may refuse (Flexible
    members are standalone VMs without latestModelApplied); then no instances, a note, and the
    members' names (a Flexible instance id is the VM name, which manualupgrade takes)."""
    flexible = state.orchestration_mode.lower() == "flexible"
    try:
        instances = [parse_instance(vm) for vm in client.list_instances()]
    except ArmRequestError as exc:
        if not flexible or not _refused_for_flexible(exc):
            raise
        names: List[str] = []
        if state.resource_id:
            names = [vm["name"] for vm in client.list_flexible_members(state.resource_id) if vm.get("name")]
        shown = f"; {len(names)} member VM(s): {', '.join(names[:10])}{' ...' if len(names) > 10 else ''}"
        return Inventory(None, (
            "per-instance latestModelApplied is not available for Flexible orchestration "
            f"(the scale-set VM list answers {exc.code or 'an error'}, HTTP {exc.status}){shown if names else ''}"
        ), names)
    if flexible and instances and all(i.latest_model_applied is None for i in instances):
        return Inventory(None, (
            f"per-instance latestModelApplied is not available: the {len(instances)} Flexible instance(s) "
            "do not report it"
        ), [i.instance_id for i in instances])
    return Inventory(instances)


def _read_back(client: ScaleSetClient, state: ScaleSetState, result: UpgradeResult) -> None:
    """Azure has been seen to answer manualupgrade with success and change nothing: read the
    instances back and move any the upgrade did not reach from `upgraded` to `remaining`.

    A Uniform set's read-back lists only the instances still on an older model (the list's
    documented `$filter=properties/latestModelApplied eq false`): after a good upgrade an empty
    page, not every VM's full body again. A Flexible set's members may not report the property
    at all, which the filter would read as "none stale": they are listed whole."""
    if state.orchestration_mode.lower() != "flexible":
        stale_now = [parse_instance(vm) for vm in client.list_instances(stale_only=True)]
        _missed(result, {i.instance_id for i in stale_now if i.latest_model_applied is False})
        return
    instances = _inventory(client, state).instances
    if instances is None:  # Flexible without latestModelApplied: nothing to check against
        result.note = "the upgrade could not be verified: per-instance latestModelApplied is not reported"
        return
    _missed(result, {i.instance_id for i in instances if i.latest_model_applied is False})  # None: no word


def _missed(result: UpgradeResult, stale: Set[str]) -> None:
    """Move the instances `result` says were upgraded but that read back `stale` to `remaining`."""
    missed = [instance for instance in result.upgraded if instance in stale]
    if not missed:
        return
    result.still_stale = missed
    result.upgraded = [instance for instance in result.upgraded if instance not in stale]
    result.remaining = missed + result.remaining
    result.complete = False
    shown = ", ".join(missed[:20]) + (" ..." if len(missed) > 20 else "")
    result.error = (f"Azure reported the manualupgrade as done, but {len(missed)} instance(s) still run the old "
                    f"model when read back: {shown}")


def _refused_for_flexible(exc: ArmRequestError) -> bool:
    """The scale-set VM API refusing a Flexible set (409 OperationNotAllowed; any 400/404/409) means
    "not offered here"; throttling, auth and server errors are failures, not missing information."""
    return exc.status in (400, 404, 409)


def _upgrade(
    client: ScaleSetClient,
    state: ScaleSetState,
    the_plan: UpgradePlan,
    options: UpgradeOptions,
    progress: Optional[Progress],
    clock: Clock,
    *,
    profile_changed: bool,
) -> UpgradeResult:
    """Carry out an upgrade plan; an incomplete upgrade raises UpgradeIncomplete with the partial result."""
    prefix = "profile changed; " if profile_changed else ""
    rerun = _command(client, "upgrade")
    if the_plan.mode == NOT_NEEDED:
        return UpgradeResult(NOT_NEEDED, the_plan.upgrade_policy, the_plan.total, note=the_plan.note)
    if the_plan.mode == SKIPPED:
        return UpgradeResult(SKIPPED, the_plan.upgrade_policy, the_plan.total, remaining=list(the_plan.stale))
    if the_plan.mode == UNAVAILABLE:
        return UpgradeResult(UNAVAILABLE, the_plan.upgrade_policy, the_plan.total, note=the_plan.note)
    if the_plan.mode == MANUAL:
        operation = OperationWait(options.wait_timeout, clock)
        result = run_manual(lambda batch: client.manual_upgrade(batch, operation), the_plan, progress)
        if result.complete and result.upgraded:
            try:
                _read_back(client, state, result)
            except AzureError as exc:
                raise _said(exc, f"{prefix}{len(result.upgraded)} instance(s) were upgraded, then reading them back "
                                 f"failed: {exc}; check with `{_command(client, 'status')}` and re-run `{rerun}` "
                                 "if any still runs an older model") from None
        if not result.complete:
            raise UpgradeIncomplete(
                f"{prefix}upgrade incomplete: {len(result.upgraded)} done, {len(result.remaining)} remaining; "
                f"re-run `{rerun}` ({result.error})",
                result,
            )
        return result
    assert the_plan.mode == PLATFORM
    if not options.wait or not the_plan.stale:
        return UpgradeResult(
            PLATFORM, the_plan.upgrade_policy, the_plan.total, remaining=list(the_plan.stale), note=the_plan.note
        )

    def current() -> List[InstanceState]:
        return _inventory(client, state).instances or []

    result = wait_until_current(
        current,
        the_plan,
        wait_timeout=options.wait_timeout,
        poll_interval=options.poll_interval,
        clock=clock,
        progress=progress,
    )
    if not result.complete:
        done = result.total - len(result.remaining)
        raise UpgradeIncomplete(
            f"{prefix}upgrade incomplete: {done} done, {len(result.remaining)} remaining ({result.error}; upgrade "
            f"policy {the_plan.upgrade_policy}: Azure applies it); re-run `{_command(client, 'upgrade', '--wait')}` "
            f"or check `{_command(client, 'status')}`",
            result,
        )
    return result
