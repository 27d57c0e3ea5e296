"""Click parameter types and option helpers shared by several command modules."""

from __future__ import annotations

import json
from typing import Any, Optional

import click

from vmss_terminate.emulator.faults import FAULT_SPEC_HELP, Fault, FaultSpecError, parse_fault_spec
from vmss_terminate.errors import UsageError
from vmss_terminate.timeout import parse_timeout


class TimeoutType(click.ParamType):
    """`--timeout`: minutes (10, 10m) or ISO 8601 (PT10M); converted to whole minutes (int)."""

    name = "timeout"

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> int:
        try:
            return parse_timeout(value)
        except UsageError as exc:
            # click already says "Invalid value for '--timeout':"; drop our own "invalid timeout".
            self.fail(str(exc).replace("invalid timeout ", "", 1), param, ctx)


TIMEOUT = TimeoutType()


class FaultType(click.ParamType):
    """`--fault SPEC` of the emulator commands: the fields of `vmss_terminate.emulator.faults`."""

    name = "fault"

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Fault:
        if isinstance(value, Fault):
            return value
        try:
            return parse_fault_spec(value)
        except FaultSpecError as exc:
            self.fail(f"{value!r}: {exc}", param, ctx)


fault_option = click.option(
    "--fault", "faults", type=FaultType(), multiple=True, metavar="SPEC",
    help=f"Inject a fault (repeatable; also POST /emulator/faults while it runs): {FAULT_SPEC_HELP}.",
)


def echo_json(data: Any) -> None:
    """`--output json`: one indented JSON document on stdout (results pass their `to_dict()`)."""
    click.echo(json.dumps(data, indent=2))
