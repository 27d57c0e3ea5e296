"""Fleet input: messages say the option and the value once (shared option types of commands/options.py);
`--tag` selects what Azure would (names case-insensitive, values exact)."""

from __future__ import annotations

import pytest

from vmss_terminate.control import Connection
from vmss_terminate.fleet import Scope, audit
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import PROD, run


@pytest.mark.parametrize("value", ["x", "0", "257"])
def test_concurrency_error_names_the_option_and_value_once(arm: ArmServers, value: str) -> None:
    result = run("fleet", "audit", "--concurrency", value)
    assert result.exit_code == 2
    assert result.stderr.strip().endswith(f"fleet audit: invalid --concurrency '{value}': "
                                          "a whole number from 1 to 256")
    assert result.stderr.count("--concurrency") == 1 and len(result.stderr.strip().splitlines()) == 1


def test_tag_values_match_exactly_and_names_case_insensitively(arm: ArmServers, state: ArmState,
                                                                conn: Connection) -> None:
    """Azure tag names are case-insensitive, values case-sensitive: `env=Prod` must not select a
    set tagged `env: prod` (a rollout would write to sets the user did not mean)."""
    state.add_scale_set(PROD, "rg-tags", "exact", capacity=1, tags={"env": "Prod"})
    state.add_scale_set(PROD, "rg-tags", "name-case", capacity=1, tags={"ENV": "Prod"})
    state.add_scale_set(PROD, "rg-tags", "value-case", capacity=1, tags={"env": "prod"})
    report = audit(Scope.build(subscriptions=[PROD], resource_groups=["rg-tags"], tags=["env=Prod"]), connection=conn)
    assert sorted(r.name for r in report.scale_sets) == ["exact", "name-case"]


def test_tag_without_a_value_is_refused(arm: ArmServers) -> None:
    result = run("fleet", "audit", "--tag", "env=")
    assert result.exit_code == 2 and "invalid --tag 'env='" in result.stderr
