"""The `vmss-terminate` command line: a thin layer over the library.

Each command group lives in `vmss_terminate/commands/` and only parses options, calls the
documented Python API and prints. Errors from the library carry their exit code
(see `errors.py`); this root turns them into one line on stderr, never a traceback.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from vmss_terminate import __version__
from vmss_terminate.errors import VmssTerminateError


class _Root(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except VmssTerminateError as exc:
            click.echo(f"error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except click.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # click >= 8.2: bare group shows help
                raise
            # Bad input is one line and exit 2, never click's multi-line usage block.
            where = f"{exc.ctx.command_path}: " if exc.ctx is not None else ""
            click.echo(f"error: {where}{exc.format_message()}", err=True)
            sys.exit(2)


@click.group(cls=_Root, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="vmss-terminate")
def main() -> None:
    """Graceful scale-in for Azure VM Scale Sets."""


def _register() -> None:
    from vmss_terminate.commands import agent, control, emulator, iac, sandbox

    for module in (agent, control, emulator, iac, sandbox):
        for command in module.COMMANDS:
            main.add_command(command)


_register()
