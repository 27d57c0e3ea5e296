"""Click parameter types and option helpers shared by several command modules."""

from __future__ import annotations

import json
from typing import Any, Callable, Optional, Tuple, Type

import click

from vmss_terminate.control.upgrade import BatchSize
from vmss_terminate.emulator.faults import FAULT_SPEC_HELP, FaultSpecError, parse_fault_spec
from vmss_terminate.errors import UsageError
from vmss_terminate.timeout import parse_timeout


class ParsedType(click.ParamType):
    """A click type over one of the library's parsers: the parser's own error becomes click's
    one-line usage error (exit 2), so the CLI and the Python API refuse the same input alike."""

    def __init__(self, name: str, parse: Callable[[Any], Any], errors: Tuple[Type[Exception], ...] = (UsageError,),
                 message: Callable[[Any, Exception], str] = lambda value, exc: str(exc)) -> None:
        self.name, self._parse, self._errors, self._message = name, parse, errors, message

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        try:
            return self._parse(value)
        except self._errors as exc:
            self.fail(self._message(value, exc), param, ctx)


# `--timeout`: minutes (10, 10m) or ISO 8601 (PT10M) -> whole minutes. click already says
# "Invalid value for '--timeout':", so our own "invalid timeout " prefix is dropped.
TIMEOUT = ParsedType("timeout", parse_timeout,
                     message=lambda value, exc: str(exc).replace("invalid timeout ", "", 1))

# `--batch-size`: a count (5) or a percentage of all instances (20%).
BATCH_SIZE = ParsedType("batch-size", BatchSize.parse)

# `--fault SPEC` of the emulator commands: the fields of `vmss_terminate.emulator.faults`.
FAULT = ParsedType("fault", parse_fault_spec, errors=(FaultSpecError,),
                   message=lambda value, exc: f"{value!r}: {exc}")

fault_option = click.option(
    "--fault", "faults", type=FAULT, multiple=True, metavar="SPEC",
    help=f"Inject a fault (repeatable; also POST /emulator/faults while it runs): {FAULT_SPEC_HELP}.",
)


def echo_json(data: Any) -> None:
    """`--output json`: one indented JSON document on stdout (results pass their `to_dict()`)."""
    click.echo(json.dumps(data, indent=2))
