"""`vmss-terminate status|enable|disable|retime|upgrade|plan`: thin wrappers over vmss_terminate.control.

Each command parses options (shared ones come from the decorators below, defined once), calls
one documented function of `vmss_terminate.control` and prints its result as text or JSON.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import click

from vmss_terminate import control
from vmss_terminate.commands.fields import ParsedType, apply_options, chosen_options, declared_options, grouped
from vmss_terminate.commands.options import TIMEOUT
from vmss_terminate.commands.output import emit, output_option, work_done
from vmss_terminate.commands.progress import ProgressBar, terminal_progress
from vmss_terminate.control.connection import CLOUDS, DEFAULT_CLOUD, Connection, check_subscription
from vmss_terminate.control.events_policy import PolicyChange
from vmss_terminate.control.names import check_resource_group, check_scale_set_name
from vmss_terminate.control.upgrade import Progress, UpgradeIncomplete, UpgradeOptions
from vmss_terminate.errors import VmssTerminateError

RESOURCE_GROUP = ParsedType("resource-group", check_resource_group)
SCALE_SET_NAME = ParsedType("name", check_scale_set_name)
SUBSCRIPTION = ParsedType("subscription", lambda value: check_subscription(value) and value)

ENDPOINT_OPTIONS = [
    click.option(
        "--arm-endpoint",
        envvar="VMSS_TERMINATE_ARM_ENDPOINT",
        help="ARM base URL (https; http only for loopback) [env VMSS_TERMINATE_ARM_ENDPOINT].",
    ),
    click.option("--cloud", type=click.Choice(list(CLOUDS)), default=DEFAULT_CLOUD, show_default=True,
                 help="The Azure cloud: its Resource Manager endpoint and token audience (--arm-endpoint overrides "
                      "the endpoint)."),
    click.option(
        "--arm-scope",
        envvar="VMSS_TERMINATE_ARM_SCOPE",
        help="Token scope (default: the cloud's <management endpoint>/.default).",
    ),
    click.option("--api-version", help="Pin the compute api-version (>= 2019-03-01); default: the SDK's."),
]
"""Where ARM is and how to talk to it: shared by the single-set and the fleet commands."""

endpoint_options = grouped(
    ENDPOINT_OPTIONS, ("arm_endpoint", "cloud", "arm_scope", "api_version"), "connection",
    lambda arm_endpoint, cloud, arm_scope, api_version: Connection(
        arm_endpoint=arm_endpoint, cloud=cloud, scope=arm_scope, api_version=api_version),
)
"""ARM without a subscription (the fleet's scope names those): the command receives `connection`."""

connection_options = grouped(
    [
        click.option("--subscription", type=SUBSCRIPTION, envvar="AZURE_SUBSCRIPTION_ID",
                     help="Subscription id or display name (looked up with GET /subscriptions) "
                          "[env AZURE_SUBSCRIPTION_ID]."),
        *ENDPOINT_OPTIONS,
    ],
    ("subscription", "arm_endpoint", "cloud", "arm_scope", "api_version"),
    "connection",
    lambda subscription, arm_endpoint, cloud, arm_scope, api_version: Connection(
        subscription_id=subscription, arm_endpoint=arm_endpoint, cloud=cloud, scope=arm_scope,
        api_version=api_version,
    ),
)
"""Where and as whom to reach ARM: the command receives `connection: Connection`."""


def scale_set_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Target, connection and output options every control command takes: the command receives
    `resource_group`, `name`, `connection` and `output`."""
    fn = connection_options(apply_options(fn, [output_option()]))
    return apply_options(fn, [
        click.option("-g", "--resource-group", type=RESOURCE_GROUP, required=True,
                     help="Resource group of the scale set."),
        click.option("-n", "--name", type=SCALE_SET_NAME, required=True, help="Scale set name."),
    ])


UPGRADE_OPTIONS = chosen_options(UpgradeOptions, skip=("upgrade",))
"""`upgrade`'s own options: every field `UpgradeOptions` declares but --no-upgrade."""

PLAN_OPTIONS = chosen_options(UpgradeOptions, only=("batch_size",), help={
    "batch_size": "Manual policy: instances per manualupgrade call, as `enable` would send them (count or % of "
                  "all instances; auto: the set's rollingUpgradePolicy.maxBatchInstancePercent, else all in one "
                  "call); the plan counts the batches."})
"""`plan`'s --batch-size: `UpgradeOptions.batch_size` (its default and type), told as the plan uses it."""

upgrade_options = declared_options(UpgradeOptions, "options", UPGRADE_OPTIONS)
"""How `upgrade` brings instances to the latest model: the command receives `options: UpgradeOptions`."""


def change_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """What enable, disable and retime take after the target: every option `UpgradeOptions`
    declares (--no-upgrade, then the upgrade's; the command receives `options: UpgradeOptions`),
    then `dry_run` and `no_wait`."""
    fn = apply_options(fn, [
        click.option("--dry-run", is_flag=True, help="Print the exact PATCH body and upgrade plan; write nothing."),
        click.option("--no-wait", is_flag=True,
                     help="Return once ARM accepted the model change (as az does); no upgrade, and the "
                          "output says how to follow up."),
    ])
    return declared_options(UpgradeOptions, "options")(fn)


_CHANGE_TIMEOUT = click.option("--timeout", type=TIMEOUT, required=True,
                               help="notBeforeTimeout: 5..15 minutes (10, 10m, PT10M, PT600S).")
_ENABLE_TIMEOUT = click.option("--timeout", type=TIMEOUT,
                               help="notBeforeTimeout: 5..15 minutes (10, 10m, PT10M, PT600S). Required, unless a "
                                    "scheduled-events policy option is given alone: then only the policy of a set "
                                    "with terminate notification enabled changes (no upgrade).")

policy_options = declared_options(PolicyChange, "policy")
"""The scheduled-events policy options (declared on `PolicyChange`): the command receives `policy`."""


def _policy(policy: PolicyChange) -> Optional[PolicyChange]:
    return None if policy.empty else policy


def _reporting_partial(output: str, resource: str, call: Callable[[Optional[Progress]], Any]) -> Any:
    """Run `call(progress)`; if the upgrade stops half-way (a failed batch, an expired --wait, Ctrl-C
    or SIGTERM), print what was done before the error (which the CLI root prints: with -o json the
    partial report travels in the error object), so a failed run's report is never lost."""
    progress: Optional[ProgressBar] = terminal_progress(output)
    try:
        return call(progress)
    except UpgradeIncomplete as exc:
        work_done()  # what was done is known: print it whole, whatever signal comes now
        if progress is not None:
            progress.finish()
        if output == "table":
            click.echo(f"upgrade {resource}: {exc.result.describe()}")
        raise
    finally:
        if progress is not None:
            progress.finish()


def _change(library: Callable[..., Any], output: str, resource_group: str, name: str, *timeout: Optional[int],
            **kw: Any) -> None:
    """Call `control.enable|disable|retime` with a progress display and print its result."""
    emit(_reporting_partial(output, f"{resource_group}/{name}", lambda progress: library(
        resource_group, name, *timeout, progress=progress, **kw)), output)


@click.command("enable")
@scale_set_options
@_ENABLE_TIMEOUT
@change_options
@policy_options
def enable_command(resource_group: str, name: str, connection: Connection, output: str, timeout: Optional[int],
                   options: UpgradeOptions, dry_run: bool, no_wait: bool, policy: PolicyChange) -> None:
    """Enable terminate notifications with --timeout, then upgrade instances to the latest model.
    With --event-grid, --events-api-version or --auto-approve KIND, change the scale set's
    scheduled-events policy in the same PATCH (alone, without --timeout: the policy only, no upgrade)."""
    _change(control.enable, output, resource_group, name, timeout, connection=connection, options=options,
            dry_run=dry_run, no_wait=no_wait, policy=_policy(policy))


@click.command("disable")
@scale_set_options
@change_options
@policy_options
def disable_command(resource_group: str, name: str, connection: Connection, output: str,
                    options: UpgradeOptions, dry_run: bool, no_wait: bool, policy: PolicyChange) -> None:
    """Disable terminate notifications, then upgrade instances to the latest model. The
    scheduled-events policy is left alone unless a policy option asks (same PATCH)."""
    _change(control.disable, output, resource_group, name, connection=connection, options=options,
            dry_run=dry_run, no_wait=no_wait, policy=_policy(policy))


@click.command("retime")
@scale_set_options
@_CHANGE_TIMEOUT
@change_options
def retime_command(resource_group: str, name: str, connection: Connection, output: str, timeout: int,
                   options: UpgradeOptions, dry_run: bool, no_wait: bool) -> None:
    """Change the timeout of an enabled scale set, then upgrade instances."""
    _change(control.retime, output, resource_group, name, timeout, connection=connection, options=options,
            dry_run=dry_run, no_wait=no_wait)


@click.command("status")
@scale_set_options
def status_command(resource_group: str, name: str, connection: Connection, output: str) -> None:
    """Show orchestration mode, upgrade policy, the terminate-notification profile, the
    scheduled-events policy and which instances run the latest model."""
    result = control.status(resource_group, name, connection=connection)
    if output != "tsv":
        emit(result, output)
        return
    work_done()
    row = status_row(result.to_dict())
    click.echo("\t".join(row))  # a header line: the columns are named, the notification's facts included
    click.echo("\t".join(_tsv_cell(value) for value in row.values()))


def status_row(data: Dict[str, Any]) -> Dict[str, Any]:
    """`status -o tsv`'s one row: every scalar field, an object's fields as `object.field` (the
    terminate notification's enabled and timeout), lists (the instances) left out."""
    row: Dict[str, Any] = {}
    for key, value in data.items():
        if isinstance(value, dict):
            row.update({f"{key}.{k}": v for k, v in value.items() if not isinstance(v, (dict, list))})
        elif not isinstance(value, list):
            row[key] = value
    return row


def _tsv_cell(value: Any) -> str:
    return "" if value is None else " ".join(str(value).replace("\t", " ").splitlines())


@click.command("upgrade")
@scale_set_options
@upgrade_options
def upgrade_command(resource_group: str, name: str, connection: Connection, output: str,
                    options: UpgradeOptions) -> None:
    """Bring stale instances to the latest model (Manual: manualupgrade in batches; Automatic /
    Rolling: report, or --wait). Re-run after a failure: only stale instances are sent."""
    result = _reporting_partial(output, f"{resource_group}/{name}", lambda progress: control.upgrade(
        resource_group, name, connection=connection, options=options, progress=progress
    ))
    if output == "table":
        click.echo(f"upgrade {resource_group}/{name}: {result.describe()}")
    else:
        emit(result, output)


class DetailedExitCommand(click.Command):
    """With --detailed-exitcode, exit codes follow Terraform: 0 no change, 1 error, 2 changes pending,
    so a bad option or input must be exit 1 here (2 would read as "changes pending"): click's parse
    errors (`make_context`) and the library's UsageError (`invoke`) alike."""

    def make_context(self, info_name: Optional[str], args: List[str], parent: Optional[click.Context] = None,
                     **extra: Any) -> click.Context:
        detailed = "--detailed-exitcode" in args
        try:
            return super().make_context(info_name, args, parent=parent, **extra)
        except click.UsageError as exc:
            if detailed:
                where = f"{exc.ctx.command_path}: " if exc.ctx is not None else ""
                raise VmssTerminateError(where + exc.format_message()) from None
            raise

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.UsageError as exc:
            if ctx.params.get("detailed_exitcode"):
                raise VmssTerminateError(exc.format_message()) from None
            raise
        except VmssTerminateError as exc:
            if ctx.params.get("detailed_exitcode") and exc.exit_code == 2:
                raise VmssTerminateError(str(exc)) from None
            raise


@click.command("plan", cls=DetailedExitCommand)
@scale_set_options
@click.option("--timeout", type=TIMEOUT, help="The timeout `enable` would set (5..15 minutes); required unless a "
                                              "scheduled-events policy option is given alone, as for `enable`.")
@declared_options(UpgradeOptions, "options", PLAN_OPTIONS)
@policy_options
@click.option("--detailed-exitcode", is_flag=True,
              help="Exit 0: no change, 1: error, 2: changes pending or compliance unknown.")
def plan_command(resource_group: str, name: str, connection: Connection, output: str, timeout: Optional[int],
                 options: UpgradeOptions, policy: PolicyChange, detailed_exitcode: bool) -> None:
    """Show what `enable` would change (profile, scheduled-events policy and stale instances)
    without writing."""
    result = control.plan(resource_group, name, timeout, connection=connection, options=options,
                          policy=_policy(policy))
    emit(result, output)
    if detailed_exitcode and (result.changes_pending or result.compliance_unknown):
        click.get_current_context().exit(2)
