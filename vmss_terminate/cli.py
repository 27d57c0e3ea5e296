"""The `vmss-terminate` command line: a thin layer over the library.

Each command group lives in `vmss_terminate/commands/` and only parses options, calls the
documented Python API and prints. This root is the one place failures become output (see
`commands/output.py` for the shape): every error is one `error: ...` line on stderr, never click's
usage block or a traceback; exit 2 for bad input, 1 for Azure/runtime failures, 130 for Ctrl-C and
143 for SIGTERM. Set VMSS_TERMINATE_DEBUG=1 to get the traceback of an unexpected exception.

Command modules are imported only when their command runs (`commands/lazy.py`), so the in-VM agent
does not load the control plane; a command that needs the `[control]` extra says so in one line
(exit 2) when it is not installed.
"""

from __future__ import annotations

import os
import sys
from typing import Any, Optional, Sequence

import click

from vmss_terminate import __version__
from vmss_terminate.commands.lazy import Lazy, LazyGroup
from vmss_terminate.commands.output import SIGNALS_OWNED, report_error, requested_output
from vmss_terminate.errors import Interrupted, VmssTerminateError, interrupt_exit_code, interrupt_name
from vmss_terminate.signals import StopOnSignals, finish_quietly, kept_handlers, raise_stop_signal

CONTROL = "control"  # the extra of vmss_terminate/extras.py (not imported here: the agent does not need it)

_CONTROL = "vmss_terminate.commands.control"
_SANDBOX = "vmss_terminate_sim.commands.sandbox"

# Top-level command name -> where it lives. Summaries are the first sentence of each command's help
# (tests/test_cli_lazy.py checks they agree); `extra` names what `pip install` must have added.
COMMANDS = {
    "agent": Lazy("vmss_terminate.commands.agent", "agent_group",
                  "The in-VM agent: drain hooks, then approve this VM's Terminate event."),
    "emulator": Lazy("vmss_terminate_sim.commands.emulator", "emulator",
                     "Run a local emulator of an Azure endpoint or the Kubernetes API (for testing hooks and pipelines)."),
    "render": Lazy("vmss_terminate.commands.iac", "render_command",
                   "Print a snippet to paste into your own template or pipeline."),
    "status": Lazy(_CONTROL, "status_command", "Show orchestration mode, upgrade policy, the terminate-notification "
                   "profile, the scheduled-events policy and which instances run the latest model.", CONTROL),
    "enable": Lazy(_CONTROL, "enable_command", "Enable terminate notifications with --timeout, then upgrade "
                   "instances to the latest model.", CONTROL),
    "disable": Lazy(_CONTROL, "disable_command", "Disable terminate notifications, then upgrade instances to the "
                    "latest model.", CONTROL),
    "retime": Lazy(_CONTROL, "retime_command", "Change the timeout of an enabled scale set, then upgrade instances.",
                   CONTROL),
    "upgrade": Lazy(_CONTROL, "upgrade_command", "Bring stale instances to the latest model (Manual: manualupgrade "
                    "in batches; Automatic / Rolling: report, or --wait).", CONTROL),
    "plan": Lazy(_CONTROL, "plan_command", "Show what `enable` would change (profile, scheduled-events policy and "
                 "stale instances) without writing.", CONTROL),
    "fleet": Lazy("vmss_terminate.commands.fleet", "fleet_group", "Audit and roll out terminate notification "
                  "across many scale sets and subscriptions (Azure Resource Graph; writes through the same code as "
                  "`enable`).", CONTROL),
    "events": Lazy("vmss_terminate.commands.central", "events_group", "List and acknowledge scheduled events of "
                   "scale sets across a scope, from outside the VMs (Resource Graph, Maintenance RP; preview).",
                   CONTROL),
    "central": Lazy("vmss_terminate.commands.central", "central_group", "The central handler: drain and acknowledge "
                    "scale-in events of a whole scope, no agent in the VMs (preview).", CONTROL),
    "demo": Lazy(_SANDBOX, "demo", "Run the whole story on local emulators, no Azure: enable terminate notifications "
                 "and upgrade (real control plane and Azure SDK), one real agent per instance with a drain hook, "
                 "scale in, drain, approve, delete.", CONTROL),
    "sandbox": Lazy(_SANDBOX, "sandbox", "Keep a local sandbox running (ARM, token endpoint, one IMDS per instance) "
                    "and print the environment that points the CLI, the Azure SDK and agents at it, to try your "
                    "own hooks.", CONTROL),
}


class _Root(LazyGroup):
    def main(self, args: Optional[Sequence[str]] = None, prog_name: Optional[str] = None,
             complete_var: Optional[str] = None, standalone_mode: bool = True, *, ends_process: bool = False,
             **extra: Any) -> Any:
        """`ends_process` (the console script): the process exits with the command, so a stop
        signal after the work is done stays ignored through the exit (never a kill by the raw
        signal after the report); an embedding caller (a test runner) gets its handlers back."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        # SIGTERM interrupts like Ctrl-C (as `StopSignal`), so work in progress is reported and the
        # exit code is 143; commands that serve in the foreground install their own handler. Once the
        # command returned (its report printed, `finish_quietly`) a late signal changes nothing.
        with kept_handlers(restore=not ends_process):
            with StopOnSignals(("SIGTERM",), then=raise_stop_signal):
                try:
                    code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
                except BaseException as exc:  # the one place every failure is reported
                    finish_quietly()
                    code = _report(exc, requested_output(argv))
                finish_quietly()
            sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        ctx.meta[SIGNALS_OWNED] = True  # main() restores the handlers: commands may call work_done()
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:  # before click turns it into "Aborted!" (and loses SIGTERM)
            raise Interrupted(f"interrupted by {interrupt_name(exc)}", exc) from None


def _report(exc: BaseException, output: str) -> int:
    """Print `exc` the one way (one line; JSON too with -o json) and return the exit code."""
    if isinstance(exc, SystemExit):
        raise exc
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").startswith(("azure", "msal")):
        # A path that needs the Azure SDK but is not registered as needing [control] (commands/lazy.py).
        report_error(f"this command needs the Azure SDK ({exc.name}): pip install 'vmss-terminate[{CONTROL}]'",
                     2, "usage", output)
        return 2
    if isinstance(exc, VmssTerminateError):
        report_error(exc.cli_message or str(exc), exc.exit_code, exc.kind, output, exc.details())
        return exc.exit_code
    if isinstance(exc, click.UsageError):
        if type(exc).__name__ == "NoArgsIsHelpError":  # click >= 8.2: a bare group shows its help
            exc.show()
            return exc.exit_code
        where = f"{exc.ctx.command_path}: " if exc.ctx is not None else ""
        report_error(f"{where}{exc.format_message()}", 2, "usage", output)
        return 2
    if isinstance(exc, click.ClickException):
        report_error(exc.format_message(), exc.exit_code, "runtime", output)
        return exc.exit_code
    if isinstance(exc, (click.Abort, KeyboardInterrupt)):
        cause = exc if isinstance(exc, KeyboardInterrupt) else (exc.__cause__ or exc.__context__)
        code = interrupt_exit_code(cause)
        report_error(f"interrupted by {interrupt_name(cause)}", code, "interrupted", output)
        return code
    if os.environ.get("VMSS_TERMINATE_DEBUG"):
        raise exc
    report_error(f"unexpected {type(exc).__name__}: {exc} (set VMSS_TERMINATE_DEBUG=1 for a traceback)", 1,
                 "runtime", output)
    return 1


@click.group(cls=_Root, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vmss-terminate")
def main() -> None:
    """Graceful scale-in for Azure VM Scale Sets."""



if __name__ == "__main__":  # python -m vmss_terminate.cli [--check PATH]: docs/cli-reference.md of this tree
    if sys.argv[1:] == ["--help-cache"]:  # commands/helptexts.py, the help the console script prints
        from vmss_terminate.commands.helpcache import write

        raise SystemExit(write(main))
    from vmss_terminate.commands.docgen import main as reference

    raise SystemExit(reference(main))
