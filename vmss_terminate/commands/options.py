"""Click parameter types and option helpers shared by several command modules."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import click

from vmss_terminate.commands.fields import ParsedType
from vmss_terminate.commands.lazy import refuse_repeated_options  # noqa: F401 - re-exported for commands
from vmss_terminate.commands.output import echo_json, output_option  # noqa: F401 - re-exported for commands
from vmss_terminate.control.upgrade import BatchSize
from vmss_terminate.emulator.faults import FAULT_SPEC_HELP, Fault, FaultSpecError, parse_fault_spec, refuse_answer_fault
from vmss_terminate.errors import UsageError
from vmss_terminate.params import number_range, whole_number
from vmss_terminate.timeout import parse_timeout

F = TypeVar("F", bound=Callable[..., Any])


def int_range(name: str, low: Optional[int] = None, high: Optional[int] = None) -> ParsedType:
    """A whole number in low..high: `invalid --concurrency 'x': a whole number from 1 to 256` (the
    option and the value said once; click's IntRange says "'x' is not a valid integer range")."""
    return ParsedType(name, whole_number(name, low, high))


def decimal_range(name: str, low: Optional[float] = None, high: Optional[float] = None,
                  what: str = "a number of seconds") -> ParsedType:
    """A decimal number in low..high typed in ASCII digits (no nan, inf, exponent or full-width
    digits): `invalid --wait-timeout 'nan': a number of seconds >= 0` (click's FloatRange takes
    `nan`, `inf` and `１０`)."""
    return ParsedType(name, number_range(name, low, high, what=what))


# `--timeout`: minutes (10, 10m) or ISO 8601 (PT10M) -> whole minutes.
TIMEOUT = ParsedType("timeout", parse_timeout)

# `--batch-size`: a count (5) or a percentage of all instances (20%).
BATCH_SIZE = ParsedType("batch-size", BatchSize.parse)

# `--fault SPEC` of the emulator commands: the fields of `vmss_terminate.emulator.faults`.
FAULT = ParsedType("fault", parse_fault_spec, errors=(FaultSpecError,),
                   message=lambda value, exc: f"{value!r}: {exc}")


def _plain_fault(text: str) -> Fault:
    fault = parse_fault_spec(text)
    refuse_answer_fault(fault)
    return fault


# ... of an emulator that does not act on answer faults (IMDS, Kubernetes): refused, not ignored.
PLAIN_FAULT = ParsedType("fault", _plain_fault, errors=(FaultSpecError,),
                         message=lambda value, exc: f"{value!r}: {exc}")


def fault_option(answer_faults: bool = False) -> Callable[[F], F]:
    """`--fault SPEC` (repeatable); `answer_faults` only for the ARM emulator, the one that acts on them."""
    return click.option(
        "--fault", "faults", type=FAULT if answer_faults else PLAIN_FAULT, multiple=True, metavar="SPEC",
        help=f"Inject a fault (repeatable; also POST /emulator/faults while it runs): {FAULT_SPEC_HELP}.",
    )


def tls_server_context(cert: Optional[Path], key: Optional[Path]) -> Optional[ssl.SSLContext]:
    """`--tls-cert/--tls-key` of an emulator -> a server context (None: plain http); a key without
    a certificate or an unloadable certificate is bad input."""
    if cert is None:
        if key is not None:
            raise UsageError("--tls-key needs --tls-cert")
        return None
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    try:
        context.load_cert_chain(str(cert), str(key) if key else None)
    except (OSError, ssl.SSLError) as exc:
        raise UsageError(f"cannot load TLS certificate {str(cert)!r}: {exc}") from None
    return context
