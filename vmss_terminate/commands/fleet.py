"""`vmss-terminate fleet audit|rollout`: thin wrappers over `vmss_terminate.fleet`.

Options follow the single-set commands (ARM endpoint, cloud, credentials) plus the fleet's scope
(--subscription, --management-group) and selectors (-g, --tag, --name).
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
import signal
import sys
import threading
from typing import Any, Callable, Dict, List, Optional, Sequence

import click
from click.core import ParameterSource

from vmss_terminate.commands.control import DetailedExitCommand, endpoint_options
from vmss_terminate.commands.fields import declared_options, grouped
from vmss_terminate.commands.output import echo_json, echo_json_list, output_option, tsv_lines, work_done
from vmss_terminate.commands.progress import ProgressBar, terminal_progress
from vmss_terminate.control.commandline import command
from vmss_terminate.control.connection import Connection
from vmss_terminate.control.events_policy import PolicyChange
from vmss_terminate.errors import StopSignal, interrupt_exit_code, interrupt_name
from vmss_terminate.fleet.findings import FINDINGS
from vmss_terminate.fleet.options import AuditOptions, RolloutOptions
from vmss_terminate.fleet.scope import Scope
from vmss_terminate.signals import StopOnSignals


def _scope(subscriptions: Sequence[str], management_groups: Sequence[str], resource_groups: Sequence[str],
           tags: Sequence[str], name: Optional[str]) -> Scope:
    return Scope.build(subscriptions, management_groups, resource_groups, tags, name)


scope_options = grouped([
    click.option("--subscription", "subscriptions", multiple=True, metavar="ID_OR_NAME",
                 help="Subscription id or display name (repeatable). Default: every subscription the "
                      "credential can see (GET /subscriptions)."),
    click.option("--management-group", "management_groups", multiple=True, metavar="ID",
                 help="Query the subscriptions under this management group (repeatable)."),
    click.option("-g", "--resource-group", "resource_groups", multiple=True,
                 help="Only scale sets in this resource group (repeatable)."),
    click.option("--tag", "tags", multiple=True, metavar="KEY=VALUE",
                 help="Only scale sets with this tag (repeatable: all must match)."),
    click.option("--name", "name", metavar="GLOB", help="Only scale sets whose name matches (e.g. 'web-*')."),
], ("subscriptions", "management_groups", "resource_groups", "tags", "name"), "scope", _scope)
"""Which scale sets a fleet command works on: the command receives `scope: Scope`."""


def fleet_options(options: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """What both fleet commands take: the command receives `scope`, `connection` and `options`
    (an instance of `options`, whose fields declare the command's own options)."""
    return lambda fn: scope_options(endpoint_options(declared_options(options, "options")(fn)))


@click.command("audit", cls=DetailedExitCommand, help=(
    "Inventory scale sets through Azure Resource Graph: terminate notification, timeout, stale\n"
    f"instances and findings ({', '.join(FINDINGS)})."))
@fleet_options(AuditOptions)
@output_option("table: for people; json: a list of scale set objects; csv / tsv: one row per scale set.",
               extra=("csv",))
@click.option("--detailed-exitcode", is_flag=True, help="Exit 0: all compliant, 1: error, 2: something non-compliant.")
def audit_command(scope: Scope, connection: Connection, options: AuditOptions, output: str,
                  detailed_exitcode: bool) -> None:
    """`fleet audit` (its help names the findings from `fleet.findings.FINDINGS`)."""
    from vmss_terminate.fleet import audit

    report = audit(scope, options, connection=connection)
    work_done()  # the work is done: a late signal changes neither the report nor the exit code
    records = report.scale_sets
    if output == "json":
        echo_json_list(r.to_dict() for r in records)  # streamed: 10,000 sets' dicts are never held at once
    elif output == "csv":
        click.echo(_csv([r.to_dict() for r in records]), nl=False)
    elif output == "tsv":
        for line in tsv_lines([_flat(r.to_dict()) for r in records]):
            click.echo(line)
    else:
        for line in _audit_table(report):
            click.echo(line)
    if report.unreadable:  # printed above with the others; an incomplete audit is never a pass
        for record in report.unreadable:
            click.echo(f"error: {record.resource_group}/{record.name}: instance list unreadable: {record.unreadable}",
                       err=True)
        click.echo(f"error: {len(report.unreadable)} scale set(s) could not be read: the audit is incomplete",
                   err=True)
        click.get_current_context().exit(1)
    if detailed_exitcode and report.failing():
        click.get_current_context().exit(2)


def _flat(row: Dict[str, Any]) -> Dict[str, Any]:
    """Lists joined with `;` (findings), objects left out (tags): one cell per field."""
    return {k: ";".join(v) if isinstance(v, list) else v for k, v in row.items() if not isinstance(v, dict)}


def _csv(rows: List[Dict[str, Any]]) -> str:
    out = io.StringIO()
    if not rows:
        return ""
    # every JSON field a column (docs/fleet.md): lists joined with `;`, objects (tags) as compact JSON
    flat = [{k: json.dumps(v, sort_keys=True, separators=(",", ":")) if isinstance(v, dict) else
             ";".join(v) if isinstance(v, list) else v for k, v in row.items()} for row in rows]
    writer = csv.DictWriter(out, fieldnames=list(flat[0]), lineterminator="\n")
    writer.writeheader()
    for row in flat:
        writer.writerow({k: "" if v is None else v for k, v in row.items()})
    return out.getvalue()


def _audit_table(report: Any) -> List[str]:
    from vmss_terminate.fleet.findings import EXPLANATIONS
    from vmss_terminate.fleet.records import COLUMNS

    rows = [r.row() for r in report.scale_sets]
    headers = {c: c.upper().replace("_", " ") for c in COLUMNS}
    headers.update(not_before_timeout="TIMEOUT", orchestration_mode="ORCHESTRATION", upgrade_mode="UPGRADE",
                   stale_instances="STALE")
    widths = {c: max([len(headers[c])] + [len(r[c]) for r in rows]) for c in COLUMNS}
    lines = ["  ".join(headers[c].ljust(widths[c]) for c in COLUMNS).rstrip()]
    lines += ["  ".join(r[c].ljust(widths[c]) for c in COLUMNS).rstrip() for r in rows]
    found = sorted({code for r in report.scale_sets for code in r.findings})
    bad = len(report.non_compliant)
    lines.append(f"{len(rows)} scale set(s), {len(rows) - bad} compliant, {bad} not "
                 f"({report.calls.get('graph_pages', 0)} Resource Graph page(s), "
                 f"{report.calls.get('instance_lists', 0)} instance list(s), {report.seconds:.1f}s)")
    lines += [f"  {code}: {EXPLANATIONS[code]}" for code in found]
    lines.append(f"  source: {report.source}")
    return lines


@click.command("rollout")
@fleet_options(RolloutOptions)
@declared_options(PolicyChange, "policy")
@output_option("table: the plan, progress and a report; json / tsv: one summary object.")
def rollout_command(scope: Scope, connection: Connection, options: RolloutOptions, policy: PolicyChange,
                    output: str) -> None:
    """Plan, then enable/retime terminate notification and upgrade instances on every
    non-compliant scale set in scope (one PATCH + batched manualupgrade per set, as `enable`);
    with --event-grid / --auto-approve KIND, the scheduled-events policy in the same PATCH.
    Ctrl-C stops starting new work; re-run with --journal to resume."""
    from vmss_terminate.fleet import rollout

    options = dataclasses.replace(options, policy=policy)

    resume_args = _resume_args(click.get_current_context())
    stop = threading.Event()
    bar = terminal_progress(output)
    display = _RolloutProgress(bar) if bar is not None else None

    def show_plan(plan: Any) -> None:
        if output == "table":
            for line in plan.lines():
                click.echo(line)

    # Ctrl-C or SIGTERM sets `stop` instead of raising: in-flight calls finish, nothing new starts,
    # and the report says what remains; the handlers go back at once, so a second signal interrupts.
    with StopOnSignals(stop=stop, then=_announce_stop, once=True) as interrupt:
        result = rollout(scope, options, connection=connection, progress=display, on_plan=show_plan, stop=stop)
        work_done()  # the work is done: a late signal changes neither the report nor the exit code
    if display is not None:
        display.finish()
    summary = result.to_dict()
    resume = _resume_command(resume_args) if result.remaining and not result.dry_run else None
    summary["resume"] = resume
    if output == "json":
        echo_json(summary)
    elif output == "tsv":
        for line in tsv_lines(_flat(summary)):
            click.echo(line)
    elif not result.dry_run:
        for line in result.lines():
            click.echo(line)
        if resume:
            click.echo(f"{len(result.remaining)} set(s) remaining; resume with: {resume}")
    if result.interrupted:
        click.get_current_context().exit(interrupt_exit_code(StopSignal(interrupt.signum or signal.SIGINT)))
    if not result.dry_run and (result.failed or result.remaining):
        click.get_current_context().exit(1)


def _resume_args(ctx: click.Context) -> List[str]:
    """This invocation's options (from the command line or the environment -- the subscription, the
    endpoint -- so the command reaches the same estate from another shell; defaults and --dry-run
    left out), rebuilt from what click parsed: the same in a shell, under a test runner or from
    another program."""
    args: List[str] = []
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name in (None, "dry_run", "help"):
            continue
        value = ctx.params.get(param.name)
        source = ctx.get_parameter_source(param.name)
        switch = isinstance(param, click.Option) and param.is_flag and bool(param.secondary_opts)
        if source not in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT) or value is None or (
                (value is False and not switch) or value == ()):  # not `value in (...)`: --wait-timeout 0 == False
            continue  # defaults apply again by themselves
        flag = max(param.opts, key=len)
        if param.is_flag and param.secondary_opts:  # --x/--no-x: whichever was given
            args.append(flag if value else max(param.secondary_opts, key=len))
            continue
        if param.is_flag:
            args.append(flag)
            continue
        for item in value if param.multiple else [value]:
            args += [flag, str(item)]
    return args


def _resume_command(args: Sequence[str]) -> str:
    """The command line to run again: the same options (its --journal, if one was used: without one
    the rollout re-audits everything, so finished sets are verified, not redone)."""
    return command("fleet", "rollout", *args)


def _announce_stop(signum: int) -> None:
    """The first Ctrl-C (SIGINT) or SIGTERM of a rollout stops it gently; a second one interrupts."""
    sys.stderr.write(f"\nstopping: no new work is started; waiting for calls in flight "
                     f"({interrupt_name(StopSignal(signum))}; Ctrl-C again to abort at once)\n")


class _RolloutProgress:
    """The shared terminal bar (count, %, elapsed, ETA) over the rollout's planned writes, labelled
    with sets done and instances upgraded; called from worker threads, so drawing is serialised."""

    def __init__(self, bar: ProgressBar) -> None:
        self.bar = bar
        self.lock = threading.Lock()

    def __call__(self, p: Any) -> None:
        with self.lock:
            self.bar.label = (f"sets {p.sets_done}/{p.sets_total}, instances "
                              f"{p.instances_upgraded}/{p.instances_total}, writes")
            if p.writes_total:
                self.bar(min(p.writes_done, p.writes_total), p.writes_total)
            else:
                self.bar(p.sets_done, p.sets_total)

    def finish(self) -> None:
        with self.lock:
            self.bar.finish()


@click.group("fleet")
def fleet_group() -> None:
    """Audit and roll out terminate notification across many scale sets and subscriptions
    (Azure Resource Graph; writes through the same code as `enable`)."""


fleet_group.add_command(audit_command)
fleet_group.add_command(rollout_command)
