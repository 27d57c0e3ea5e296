"""The `vmss-terminate` command line: a thin layer over the library.

Each command group lives in `vmss_terminate/commands/` and only parses options, calls the
documented Python API and prints. This root is the one place failures become output (see
`commands/output.py` for the shape): every error is one `error: ...` line on stderr, never click's
usage block or a traceback; exit 2 for bad input, 1 for Azure/runtime failures, 130 for Ctrl-C and
143 for SIGTERM. Set VMSS_TERMINATE_DEBUG=1 to get the traceback of an unexpected exception.
"""

from __future__ import annotations

import os
import signal
import sys
from typing import Any, Optional, Sequence

import click

from vmss_terminate import __version__
from vmss_terminate.commands.options import refuse_repeated_options
from vmss_terminate.commands.output import report_error, requested_output
from vmss_terminate.errors import Interrupted, StopSignal, VmssTerminateError, interrupt_exit_code, interrupt_name


class _Root(click.Group):
    def main(self, args: Optional[Sequence[str]] = None, prog_name: Optional[str] = None,  # type: ignore[override]
             complete_var: Optional[str] = None, standalone_mode: bool = True, **extra: Any) -> Any:
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        previous = _raise_on_sigterm()
        try:
            code = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except BaseException as exc:  # noqa: BLE001 - the one place every failure is reported
            code = _report(exc, requested_output(argv))
        finally:
            if previous is not None:
                signal.signal(signal.SIGTERM, previous)
        sys.exit(code if isinstance(code, int) else 0)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except KeyboardInterrupt as exc:  # before click turns it into "Aborted!" (and loses SIGTERM)
            raise Interrupted(f"interrupted by {interrupt_name(exc)}", exc) from None


def _report(exc: BaseException, output: str) -> int:
    """Print `exc` the one way (one line; JSON too with -o json) and return the exit code."""
    if isinstance(exc, SystemExit):
        raise exc
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


def _raise_on_sigterm() -> Any:
    """SIGTERM interrupts like Ctrl-C (as `StopSignal`), so work in progress is reported and the
    exit code is 143; commands that serve in the foreground install their own handler."""

    def handler(signum: int, frame: Any) -> None:
        raise StopSignal(signum)

    try:
        return signal.signal(signal.SIGTERM, handler)
    except ValueError:  # not the main thread (an embedding application): leave signals alone
        return None


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vmss-terminate")
def main() -> None:
    """Graceful scale-in for Azure VM Scale Sets."""


def _register() -> None:
    from vmss_terminate.commands import agent, control, emulator, fleet, iac, sandbox

    for module in (agent, control, emulator, fleet, iac, sandbox):
        for command in module.COMMANDS:
            main.add_command(command)
    refuse_repeated_options(main)


_register()
