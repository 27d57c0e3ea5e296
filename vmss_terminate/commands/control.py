"""`vmss-terminate status|enable|disable|retime|upgrade|plan`: thin wrappers over vmss_terminate.control.

Each command parses options (shared ones come from the decorators below, defined once), calls
one documented function of `vmss_terminate.control` and prints its result as text or JSON.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional

import click

from vmss_terminate import control
from vmss_terminate.commands.options import BATCH_SIZE, TIMEOUT, ParsedType
from vmss_terminate.commands.output import emit, output_option
from vmss_terminate.commands.progress import ProgressBar, terminal_progress
from vmss_terminate.control.client import CLOUDS, DEFAULT_CLOUD, Connection, check_subscription
from vmss_terminate.control.names import check_resource_group, check_scale_set_name
from vmss_terminate.control.upgrade import Progress, UpgradeIncomplete, UpgradeOptions
from vmss_terminate.errors import UsageError, VmssTerminateError

RESOURCE_GROUP = ParsedType("resource-group", check_resource_group)
SCALE_SET_NAME = ParsedType("name", check_scale_set_name)
SUBSCRIPTION = ParsedType("subscription", lambda value: check_subscription(value) and value)


def _apply(fn: Callable[..., Any], options: List[Callable[[Any], Any]]) -> Callable[..., Any]:
    for option in reversed(options):
        fn = option(fn)
    return fn


def scale_set_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """Target, connection and output options every control command takes."""
    options = [
        click.option("-g", "--resource-group", type=RESOURCE_GROUP, required=True,
                     help="Resource group of the scale set."),
        click.option("-n", "--name", type=SCALE_SET_NAME, required=True, help="Scale set name."),
        click.option("--subscription", type=SUBSCRIPTION, envvar="AZURE_SUBSCRIPTION_ID",
                     help="Subscription id or display name (looked up with GET /subscriptions) "
                          "[env AZURE_SUBSCRIPTION_ID]."),
        click.option(
            "--arm-endpoint",
            envvar="VMSS_TERMINATE_ARM_ENDPOINT",
            help="ARM base URL (https; http only for loopback) [env VMSS_TERMINATE_ARM_ENDPOINT].",
        ),
        click.option("--cloud", type=click.Choice(list(CLOUDS)), default=DEFAULT_CLOUD, show_default=True),
        click.option(
            "--arm-scope",
            envvar="VMSS_TERMINATE_ARM_SCOPE",
            help="Token scope (default: the cloud's <management endpoint>/.default).",
        ),
        click.option("--api-version", help="Pin the compute api-version (>= 2019-03-01); default: the SDK's."),
        output_option(),
    ]
    return _apply(fn, options)


def upgrade_options(with_skip: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """How to bring instances to the latest model; `with_skip` adds --no-upgrade (change commands)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        options = [
            click.option(
                "--batch-size", type=BATCH_SIZE, default="20%", show_default=True,
                help="Manual policy: instances per manualupgrade call (count or % of all instances).",
            ),
            click.option("--wait", is_flag=True, help="Automatic/Rolling policy: wait until every instance is current."),
            click.option("--wait-timeout", type=click.FloatRange(min=0), default=1800.0, show_default=True,
                         help="Seconds to wait with --wait."),
            click.option("--poll-interval", type=click.FloatRange(min=0.01), default=10.0, show_default=True,
                         help="Seconds between instance-list polls with --wait."),
        ]
        if with_skip:
            options.insert(0, click.option("--no-upgrade", is_flag=True, help="Change the model only."))
        return _apply(fn, options)

    return decorate


def _connection(kw: Dict[str, Any]) -> Connection:
    return Connection(
        subscription_id=kw.pop("subscription"),
        arm_endpoint=kw.pop("arm_endpoint"),
        cloud=kw.pop("cloud"),
        scope=kw.pop("arm_scope"),
        api_version=kw.pop("api_version"),
    )


def _upgrade_options(kw: Dict[str, Any]) -> UpgradeOptions:
    return UpgradeOptions(
        upgrade=not kw.pop("no_upgrade", False),
        batch_size=kw.pop("batch_size"),
        wait=kw.pop("wait"),
        wait_timeout=kw.pop("wait_timeout"),
        poll_interval=kw.pop("poll_interval"),
    )


def _reporting_partial(output: str, resource: str, call: Callable[[Optional[Progress]], Any]) -> Any:
    """Run `call(progress)`; if the upgrade stops half-way (a failed batch, an expired --wait, Ctrl-C
    or SIGTERM), print what was done before the error (which the CLI root prints: with -o json the
    partial report travels in the error object), so a failed run's report is never lost."""
    progress: Optional[ProgressBar] = terminal_progress(output)
    try:
        return call(progress)
    except UpgradeIncomplete as exc:
        if progress is not None:
            progress.finish()
        if output == "table":
            click.echo(f"upgrade {resource}: {exc.result.describe()}")
        raise
    finally:
        if progress is not None:
            progress.finish()


def _change_command(name: str, doc: str, with_timeout: bool) -> click.Command:
    """enable / disable / retime share everything but the timeout and the library function."""
    library = getattr(control, name)

    def run(**kw: Any) -> None:
        output = kw.pop("output")
        rg, vmss = kw.pop("resource_group"), kw.pop("name")
        connection = _connection(kw)
        options = _upgrade_options(kw)
        args = (rg, vmss, kw.pop("timeout")) if with_timeout else (rg, vmss)
        dry_run, no_wait = kw.pop("dry_run"), kw.pop("no_wait")
        result = _reporting_partial(output, f"{rg}/{vmss}", lambda progress: library(
            *args, connection=connection, options=options, dry_run=dry_run, progress=progress, no_wait=no_wait
        ))
        emit(result, output)

    run.__doc__ = doc
    run.__name__ = name
    command = click.option("--no-wait", is_flag=True,
                           help="Return once ARM accepted the model change (as az does); no upgrade, and the "
                                "output says how to follow up.")(run)
    command = click.option("--dry-run", is_flag=True,
                           help="Print the exact PATCH body and upgrade plan; write nothing.")(command)
    command = upgrade_options(with_skip=True)(command)
    if with_timeout:
        command = click.option("--timeout", type=TIMEOUT, required=True,
                               help="notBeforeTimeout: 5..15 minutes (10, 10m, PT10M, PT600S).")(command)
    return click.command(name)(scale_set_options(command))


@click.command("status")
@scale_set_options
def status_command(**kw: Any) -> None:
    """Show orchestration mode, upgrade policy, the terminate-notification profile and which
    instances run the latest model."""
    output = kw.pop("output")
    result = control.status(kw.pop("resource_group"), kw.pop("name"), connection=_connection(kw))
    emit(result, output)


@click.command("upgrade")
@scale_set_options
@upgrade_options(with_skip=False)
def upgrade_command(**kw: Any) -> None:
    """Bring stale instances to the latest model (Manual: manualupgrade in batches; Automatic /
    Rolling: report, or --wait). Re-run after a failure: only stale instances are sent."""
    output = kw.pop("output")
    rg, vmss = kw.pop("resource_group"), kw.pop("name")
    connection, options = _connection(kw), _upgrade_options(kw)
    result = _reporting_partial(output, f"{rg}/{vmss}", lambda progress: control.upgrade(
        rg, vmss, connection=connection, options=options, progress=progress
    ))
    if output == "table":
        click.echo(f"upgrade {rg}/{vmss}: {result.describe()}")
    else:
        emit(result, output)


class _PlanCommand(click.Command):
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
        except UsageError as exc:
            if ctx.params.get("detailed_exitcode"):
                raise VmssTerminateError(str(exc)) from None
            raise


@click.command("plan", cls=_PlanCommand)
@scale_set_options
@click.option("--timeout", type=TIMEOUT, required=True, help="The timeout `enable` would set (5..15 minutes).")
@click.option("--batch-size", type=BATCH_SIZE, default="20%", show_default=True)
@click.option("--detailed-exitcode", is_flag=True,
              help="Exit 0: no change, 1: error, 2: changes pending or compliance unknown.")
def plan_command(**kw: Any) -> None:
    """Show what `enable --timeout` would change (profile and stale instances) without writing."""
    output = kw.pop("output")
    detailed = kw.pop("detailed_exitcode")
    result = control.plan(
        kw.pop("resource_group"), kw.pop("name"), kw.pop("timeout"),
        connection=_connection(kw), options=UpgradeOptions(batch_size=kw.pop("batch_size")),
    )
    emit(result, output)
    if detailed and (result.changes_pending or result.compliance_unknown):
        click.get_current_context().exit(2)


enable_command = _change_command(
    "enable",
    "Enable terminate notifications with --timeout, then upgrade instances to the latest model.",
    with_timeout=True,
)
disable_command = _change_command(
    "disable", "Disable terminate notifications, then upgrade instances to the latest model.", with_timeout=False
)
retime_command = _change_command(
    "retime", "Change the timeout of an enabled scale set, then upgrade instances.", with_timeout=True
)
