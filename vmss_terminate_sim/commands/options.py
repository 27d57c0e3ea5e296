"""Click options of the emulator commands only (faults, TLS): the product's commands never see them."""

from __future__ import annotations

import ssl
from pathlib import Path
from typing import Any, Callable, Optional, TypeVar

import click

from vmss_terminate.commands.fields import ParsedType
from vmss_terminate.errors import UsageError
from vmss_terminate_sim.emulator.faults import (
    FAULT_SPEC_HELP,
    Fault,
    FaultSpecError,
    parse_fault_spec,
    refuse_answer_fault,
)

F = TypeVar("F", bound=Callable[..., Any])


# `--fault SPEC` of the emulator commands: the fields of `vmss_terminate_sim.emulator.faults`.
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
