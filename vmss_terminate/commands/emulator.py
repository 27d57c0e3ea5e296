"""`vmss-terminate emulator imds|arm`: run a local emulator in the foreground."""

from __future__ import annotations

import click


@click.group()
def emulator() -> None:
    """Run a local emulator of an Azure endpoint (for testing hooks and pipelines)."""


def _register() -> None:
    from vmss_terminate.commands.emulator_arm import arm_command
    from vmss_terminate.commands.emulator_imds import imds_command

    emulator.add_command(imds_command)
    emulator.add_command(arm_command)


_register()

COMMANDS = [emulator]
