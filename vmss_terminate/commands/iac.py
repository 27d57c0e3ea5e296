"""`vmss-terminate render`: print the terminate-notification setting for your own IaC (thin over iac.render)."""

from __future__ import annotations

from typing import Optional

import click

from vmss_terminate.commands.options import TIMEOUT
from vmss_terminate.errors import UsageError
from vmss_terminate.iac.render import FORMATS, render


@click.command("render")
@click.option("--format", "fmt", type=click.Choice(FORMATS), default=None,
              help="arm/bicep: the scheduledEventsProfile fragment; terraform: the termination_notification "
                   "block; rest: the exact PATCH body `enable` sends; cli: the az and vmss-terminate commands; policy: an Azure "
                   "Policy definition auditing scale sets for this timeout. "
                   "Required.")
@click.option("--timeout", type=TIMEOUT, default=None,
              help="Delay Azure waits before deleting an instance: 5..15 minutes (10, 10m, PT10M). "
                   "Required unless --disable.")
@click.option("--disable", is_flag=True, help="Render the setting that turns terminate notifications off.")
@click.option("-g", "--resource-group", default=None, help="Resource group for --format cli (default: $RESOURCE_GROUP).")
@click.option("-n", "--name", default=None, help="Scale set name for --format cli (default: $VMSS_NAME).")
def render_command(fmt: str, timeout: Optional[int], disable: bool,
                   resource_group: Optional[str], name: Optional[str]) -> None:
    """Print a snippet to paste into your own template or pipeline.

    \b
    vmss-terminate render --format terraform --timeout 10m
    vmss-terminate render --format rest --timeout PT10M > body.json
    """
    if fmt is None:  # checked here, not by click, whose message spans several lines
        raise UsageError(f"--format is required: one of {', '.join(FORMATS)}")
    if timeout is None and not disable:
        raise UsageError("--timeout is required (5..15 minutes, e.g. 10m) unless --disable")
    if timeout is not None and disable:
        raise UsageError("--disable takes no --timeout")
    text = render(fmt, timeout, enable=not disable, resource_group=resource_group, name=name)
    # Bytes, not text: `rest` must reach stdout exactly as the control plane sends it (no newline translation).
    click.echo(text.encode("utf-8"), nl=False)
