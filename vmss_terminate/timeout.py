"""The terminate-notification timeout: one type shared by the CLI, the library and the templates.

Azure accepts `notBeforeTimeout` from PT5M to PT15M. Users write it many ways; we accept
ISO 8601 durations (`PT10M`, `PT600S`, `PT0H10M`), bare minutes (`10`) and `10m`, and always
normalise to `PT{n}M`. Anything else, or outside 5..15 whole minutes, is a UsageError (exit 2),
raised before any request is sent.
"""

from __future__ import annotations

import re
from typing import Union

from vmss_terminate.errors import UsageError

MIN_MINUTES = 5
MAX_MINUTES = 15

_ISO = re.compile(r"^PT(?:(\d+)H)?(?:(\d+)M)?(?:(\d+)S)?$", re.IGNORECASE)
_MINUTES = re.compile(r"^(\d+)\s*(?:m|min|mins|minutes?)?$", re.IGNORECASE)


class InvalidTimeout(UsageError):
    """The timeout is malformed or outside PT5M..PT15M."""


def parse_timeout(value: Union[str, int]) -> int:
    """Return the timeout in whole minutes, or raise InvalidTimeout with a one-line reason."""
    text = str(value).strip()
    seconds = _to_seconds(text)
    if seconds is None:
        raise InvalidTimeout(
            f"invalid timeout {text!r}: use minutes (10, 10m) or ISO 8601 (PT10M, PT600S)"
        )
    if seconds % 60:
        raise InvalidTimeout(f"invalid timeout {text!r}: must be a whole number of minutes")
    minutes = seconds // 60
    if not MIN_MINUTES <= minutes <= MAX_MINUTES:
        raise InvalidTimeout(
            f"invalid timeout {text!r}: must be between {MIN_MINUTES} and {MAX_MINUTES} minutes "
            f"(PT{MIN_MINUTES}M..PT{MAX_MINUTES}M), got {minutes} minutes"
        )
    return minutes


def to_iso(minutes: int) -> str:
    """`10` -> `PT10M`, the form Azure returns and we always send."""
    return f"PT{int(minutes)}M"


def normalize_timeout(value: Union[str, int]) -> str:
    """Parse and validate, then return the canonical `PT{n}M` form."""
    return to_iso(parse_timeout(value))


def iso_to_minutes_lenient(value: str) -> Union[int, None]:
    """Minutes of an ISO duration read back from Azure, without range checks (None if unreadable)."""
    seconds = _to_seconds(str(value).strip()) if value else None
    if seconds is None or seconds % 60:
        return None
    return seconds // 60


def _to_seconds(text: str) -> Union[int, None]:
    match = _MINUTES.match(text)
    if match:
        return int(match.group(1)) * 60
    match = _ISO.match(text)
    if match and any(match.groups()):
        hours, minutes, seconds = (int(g) if g else 0 for g in match.groups())
        return hours * 3600 + minutes * 60 + seconds
    return None
