"""Fleet CLI messages say the option and the value once (shared option types of commands/options.py)."""

from __future__ import annotations

import pytest

from vmss_terminate.emulator.arm.app import ArmServers

from .conftest import run


@pytest.mark.parametrize("value", ["x", "0", "257"])
def test_concurrency_error_names_the_option_and_value_once(arm: ArmServers, value: str) -> None:
    result = run("fleet", "audit", "--concurrency", value)
    assert result.exit_code == 2
    assert result.stderr.strip().endswith(f"fleet audit: invalid --concurrency '{value}': "
                                          "a whole number from 1 to 256")
    assert result.stderr.count("--concurrency") == 1 and len(result.stderr.strip().splitlines()) == 1
