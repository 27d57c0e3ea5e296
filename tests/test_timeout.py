"""The one timeout type shared by CLI, library and templates."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from vmss_terminate.errors import UsageError
from vmss_terminate.timeout import InvalidTimeout, iso_to_minutes_lenient, normalize_timeout, parse_timeout


@pytest.mark.parametrize(
    "text, minutes",
    [("PT10M", 10), ("pt10m", 10), ("PT600S", 10), ("PT0H10M", 10), ("10", 10), ("10m", 10), ("5", 5),
     ("15m", 15), ("PT5M", 5), ("PT15M", 15), ("7", 7), (12, 12), ("PT4M60S", 5)],
)
def test_accepted_forms(text: object, minutes: int) -> None:
    assert parse_timeout(text) == minutes
    assert normalize_timeout(text) == f"PT{minutes}M"


@pytest.mark.parametrize("text", ["PT4M", "4", "16m", "PT16M", "PT1H", "PT0M", "0", "PT240S", "PT960S"])
def test_out_of_range_is_usage_error(text: str) -> None:
    with pytest.raises(InvalidTimeout) as info:
        parse_timeout(text)
    assert "between 5 and 15 minutes" in str(info.value)
    assert isinstance(info.value, UsageError) and info.value.exit_code == 2


@pytest.mark.parametrize("text", ["", "ten", "PT", "P1D", "10h", "-5", "PT10.5M", "10 m x", "PT630S",
                                  " 7 ", "１０", "PT１０M", "10\n", "9" * 5000])  # strict ASCII, bounded (issue 20)
def test_malformed_is_usage_error(text: str) -> None:
    with pytest.raises(InvalidTimeout) as info:
        parse_timeout(text)
    assert "\n" not in str(info.value)


@given(st.integers(min_value=0, max_value=10_000))
def test_seconds_form_agrees_with_minutes_form(seconds: int) -> None:
    """PT{s}S is accepted exactly when it is a whole number of minutes within 5..15."""
    valid = seconds % 60 == 0 and 5 <= seconds // 60 <= 15
    if valid:
        assert parse_timeout(f"PT{seconds}S") == seconds // 60
    else:
        with pytest.raises(InvalidTimeout):
            parse_timeout(f"PT{seconds}S")


def test_lenient_reader_for_values_azure_returns() -> None:
    assert iso_to_minutes_lenient("PT20M") == 20
    assert iso_to_minutes_lenient("") is None
    assert iso_to_minutes_lenient("garbage") is None


@pytest.mark.parametrize("text, minutes", [
    ("P0DT10M", 10), ("PT10.0M", 10), ("PT0.25H", 15), ("PT10,0M", 10), ("P0Y0M0DT5M", 5), ("P0W0DT0H12M", 12),
    ("PT0.1H", 6), ("PT599.999S", None), ("P0.01D", None), ("P1M", None), ("P0DT", None),
])
def test_iso_8601_durations_are_read_as_iso_8601_allows(text: str, minutes: object) -> None:
    """ISO 8601 forms within PT5M..PT15M are accepted (decimals, days, zero years/months) and written
    back as the canonical PTnM; a fraction of a minute or a calendar month is refused, one line."""
    if minutes is None:
        with pytest.raises(InvalidTimeout) as info:
            parse_timeout(text)
        assert "\n" not in str(info.value)
    else:
        assert normalize_timeout(text) == f"PT{minutes}M"
