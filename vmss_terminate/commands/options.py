"""Click parameter types and option helpers shared by several command modules."""

from __future__ import annotations

from typing import Any, Callable, Optional, TypeVar

from vmss_terminate.commands.fields import ParsedType
from vmss_terminate.commands.lazy import refuse_repeated_options  # noqa: F401 - re-exported for commands
from vmss_terminate.commands.output import echo_json, output_option  # noqa: F401 - re-exported for commands
from vmss_terminate.control.upgrade import BatchSize
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

# `--batch-size`: auto, a count (5) or a percentage of all instances (20%).
BATCH_SIZE = ParsedType("batch-size", BatchSize.parse)

