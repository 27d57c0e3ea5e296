"""The terminate-notification timeout: one type shared by the CLI, the library and the templates.

Azure accepts `notBeforeTimeout` from PT5M to PT15M. Users write it many ways; we accept bare
minutes (`10`), `10m`, and any ISO 8601 duration (`PT10M`, `PT600S`, `PT0H10M`, `P0DT10M`,
`PT10.0M`, `PT0.25H`, `P0W`-style zero parts; a decimal fraction with `.` or `,`) whose length is a
whole number of minutes, and always normalise to the canonical `PT{n}M`. Years and months have no
fixed length, so only zero ones are accepted. Parsed with the stdlib (the agent-only install stays
lean). Anything else, or outside 5..15 minutes, is an `InvalidValue` (exit 2), raised before any
request is sent.
"""

from __future__ import annotations

import functools
import re
from fractions import Fraction
from typing import Optional, Union

from vmss_terminate.errors import InvalidValue

MIN_MINUTES = 5
MAX_MINUTES = 15

_NUMBER = r"[0-9]{1,12}(?:[.,][0-9]{1,12})?"  # ASCII digits, bounded: never int() of 5,000 digits
_ISO = re.compile(
    rf"^P(?:(?P<Y>{_NUMBER})Y)?(?:(?P<MO>{_NUMBER})M)?(?:(?P<W>{_NUMBER})W)?(?:(?P<D>{_NUMBER})D)?"
    rf"(?:T(?=.)(?:(?P<H>{_NUMBER})H)?(?:(?P<MI>{_NUMBER})M)?(?:(?P<S>{_NUMBER})S)?)?\Z",
    re.IGNORECASE | re.ASCII,
)
_SECONDS = {"W": 7 * 86400, "D": 86400, "H": 3600, "MI": 60, "S": 1}
_MINUTES = re.compile(r"^([0-9]{1,12}) ?(?:m|min|mins|minutes?)?\Z", re.IGNORECASE | re.ASCII)


class InvalidTimeout(InvalidValue):
    """The timeout is malformed or outside PT5M..PT15M."""

    def __init__(self, value: str, reason: str) -> None:
        super().__init__("timeout", value, reason)


def parse_timeout(value: Union[str, int]) -> int:
    """Return the timeout in whole minutes, or raise InvalidTimeout with a one-line reason."""
    text = str(value)  # not stripped: ' 10' is not a number (docs/cli-reference.md: strict ASCII)
    seconds = _to_seconds(text)
    if seconds is None:
        raise InvalidTimeout(text, "use minutes (10, 10m) or an ISO 8601 duration (PT10M, PT600S, P0DT10M)")
    if seconds.denominator != 1 or seconds % 60:
        raise InvalidTimeout(text, "must be a whole number of minutes")
    minutes = int(seconds // 60)
    if not MIN_MINUTES <= minutes <= MAX_MINUTES:
        raise InvalidTimeout(
            text,
            f"must be between {MIN_MINUTES} and {MAX_MINUTES} minutes (PT{MIN_MINUTES}M..PT{MAX_MINUTES}M), "
            f"got {minutes} minutes",
        )
    return minutes


def to_iso(minutes: int) -> str:
    """`10` -> `PT10M`, the form Azure returns and we always send."""
    return f"PT{int(minutes)}M"


def normalize_timeout(value: Union[str, int]) -> str:
    """Parse and validate, then return the canonical `PT{n}M` form."""
    return to_iso(parse_timeout(value))


@functools.lru_cache(maxsize=256)
def iso_to_minutes_lenient(value: str) -> Union[int, None]:
    """Minutes of an ISO duration read back from Azure, without range checks (None if unreadable).

    Cached: an estate repeats a handful of values (PT5M, PT10M) over thousands of rows, and every
    record, finding and output column reads it; each distinct value is parsed once."""
    seconds = _to_seconds(str(value).strip()) if value else None
    if seconds is None or seconds.denominator != 1 or seconds % 60:
        return None
    return int(seconds // 60)


def _to_seconds(text: str) -> Optional[Fraction]:
    match = _MINUTES.match(text)
    if match:
        return Fraction(int(match.group(1)) * 60)
    match = _ISO.match(text)
    if not match or not any(match.groupdict().values()):
        return None
    parts = {key: Fraction(number.replace(",", ".")) for key, number in match.groupdict().items() if number}
    if parts.get("Y") or parts.get("MO"):
        return None  # a year or a month has no fixed length
    return sum((parts.get(key, Fraction(0)) * factor for key, factor in _SECONDS.items()), Fraction(0))
