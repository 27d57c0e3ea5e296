"""Values checked before any request (issue 20 items 10-13): endpoints, empty scopes and groups,
numbers typed in anything but ASCII digits (full-width, spaces, nan, inf, 5,000 digits), short
hex "ids", and a CA-bundle variable naming no file -- each one line, exit 2, no request sent."""

from __future__ import annotations

from typing import List

import pytest

from vmss_terminate_sim.emulator.arm.app import ArmServers

from .conftest import RG, requests_seen, run

LONG = "9" * 5000
TARGET = ["-g", RG, "-n", "web"]


@pytest.mark.parametrize("args, words", [
    (["status", *TARGET, "--arm-endpoint", "http://127.0.0.1:0"], "invalid --arm-endpoint 'http://127.0.0.1:0': port 0"),
    (["status", *TARGET, "--arm-endpoint", "http://[::1"], "invalid --arm-endpoint 'http://[::1': not a URL"),
    (["status", *TARGET, "--arm-endpoint", "http://127.0.0.1:99999"], "invalid --arm-endpoint 'http://127.0.0.1:99999'"),
    (["status", *TARGET, "--arm-endpoint", "http://127.0.0.1:１０"], "invalid --arm-endpoint"),
    (["status", *TARGET, "--arm-scope", ""], "invalid --arm-scope '': empty"),
    (["status", *TARGET, "--subscription", "0000-1111-2222"], "invalid --subscription '0000-1111-2222': not a "
                                                              "subscription id"),
    (["upgrade", *TARGET, "--wait-timeout", "nan"], "invalid --wait-timeout 'nan': a number of seconds >= 0"),
    (["upgrade", *TARGET, "--poll-interval", "inf"], "invalid --poll-interval 'inf'"),
    (["upgrade", *TARGET, "--wait-timeout", "１０"], "invalid --wait-timeout '１０'"),
    (["upgrade", *TARGET, "--wait-timeout", " 10"], "invalid --wait-timeout ' 10'"),
    (["upgrade", *TARGET, "--wait-timeout", LONG], "(5000 characters)"),
    (["upgrade", *TARGET, "--batch-size", "１０"], "invalid --batch-size '１０'"),
    (["upgrade", *TARGET, "--batch-size", " 10"], "invalid --batch-size ' 10'"),
    (["enable", *TARGET, "--timeout", "１０"], "invalid --timeout '１０'"),
    (["enable", *TARGET, "--timeout", " 10"], "invalid --timeout ' 10'"),
    (["enable", *TARGET, "--timeout", LONG], "(5000 characters)"),
    (["fleet", "audit", "--management-group", ""], "invalid --management-group ''"),
    (["fleet", "audit", "--concurrency", "１０"], "invalid --concurrency '１０'"),
    (["fleet", "audit", "--concurrency", LONG], "invalid --concurrency"),
    (["emulator", "imds", "--rate-limit", "nan"], "invalid --rate-limit 'nan'"),
    (["emulator", "arm", "--port", "８０８０"], "invalid --port '８０８０'"),
    (["sandbox", "--speed", "inf"], "invalid --speed 'inf'"),
    (["demo", "--instances", "４"], "invalid --instances '４'"),
])
def test_bad_values_are_one_line_exit_2_before_any_request(arm: ArmServers, args: List[str], words: str) -> None:
    result = run(*args)
    assert result.exit_code == 2, result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and len(lines[0]) < 300, result.stderr
    assert "Traceback" not in result.output
    assert requests_seen(arm) == 0


def test_a_ca_bundle_variable_naming_no_file_is_named(arm: ArmServers, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", "/nonexistent/ca.pem")
    result = run("status", *TARGET, "--arm-endpoint", "https://127.0.0.1:1")
    assert result.exit_code == 1, result.output
    (line,) = result.stderr.strip().splitlines()
    assert "REQUESTS_CA_BUNDLE=/nonexistent/ca.pem names no usable CA certificate bundle" in line, line


def test_unicode_digits_and_spaces_are_refused_by_both_agent_parsers() -> None:
    import click

    from vmss_terminate.agent.command import ArgumentError, parse_args
    from vmss_terminate.commands.agent import run_command

    for value in ("１", " 1", "1e400", "1_0", "1e", LONG):  # nan / inf: read, then refused by AgentConfig (exit 2)
        with pytest.raises(ArgumentError):
            parse_args(["--poll-interval", value])
        with pytest.raises(click.UsageError):
            run_command.make_context("run", ["--poll-interval", value])


def test_emulator_event_and_fault_numbers_are_strict() -> None:
    from vmss_terminate.errors import UsageError
    from vmss_terminate_sim.emulator.faults import FaultSpecError, parse_fault_spec
    from vmss_terminate_sim.emulator.imds.launch import parse_event_spec

    assert parse_event_spec("Terminate:vm_1@60")["not_before_in"] == 60.0
    for spec in ("Terminate:vm_1@６０", "Terminate:vm_1@nan", "Terminate:vm_1@ 60", "Terminate:vm_1@" + LONG):
        with pytest.raises(UsageError):
            parse_event_spec(spec)
    assert parse_fault_spec("status=503,times=2").status == 503
    for spec in ("status=５０３", "delay=inf", "times=" + LONG):
        with pytest.raises(FaultSpecError):
            parse_fault_spec(spec)
