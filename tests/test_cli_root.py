"""The CLI root turns library errors into one line and the right exit code."""

from __future__ import annotations

import os

import click
from clifork import run_forked
from helpers import invoke_cli

from vmss_terminate import cli
from vmss_terminate.commands.options import TIMEOUT
from vmss_terminate.errors import AzureError, UsageError


@click.command("probe-errors")
@click.option("--kind", type=click.Choice(["usage", "azure", "none"]))
@click.option("--timeout", type=TIMEOUT)
def _probe(kind: str, timeout: int) -> None:
    if kind == "usage":
        raise UsageError("bad thing")
    if kind == "azure":
        raise AzureError("ResourceNotFound: nope")
    click.echo(f"ok {timeout}")


def _run(*args: str) -> "click.testing.Result":
    cli.main.add_command(_probe)
    try:
        return invoke_cli(cli.main, list(args))
    finally:
        cli.main.commands.pop("probe-errors", None)


def test_usage_error_is_one_line_exit_2() -> None:
    result = _run("probe-errors", "--kind", "usage")
    assert result.exit_code == 2
    assert result.output.strip() == "error: bad thing"


def test_azure_error_is_exit_1() -> None:
    result = _run("probe-errors", "--kind", "azure")
    assert result.exit_code == 1 and "ResourceNotFound" in result.output


def test_bad_timeout_is_one_line_exit_2() -> None:
    result = _run("probe-errors", "--kind", "none", "--timeout", "20m")
    assert result.exit_code == 2
    assert len(result.output.strip().splitlines()) == 1
    assert "between 5 and 15 minutes" in result.output


def test_good_timeout_is_minutes() -> None:
    assert _run("probe-errors", "--kind", "none", "--timeout", "PT600S").output.strip() == "ok 10"


def test_unknown_command_is_one_line_exit_2_without_traceback() -> None:
    proc = run_forked(["no-such-command"], os.environ, os.getcwd(), timeout=60)  # a process, forked warm
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: vmss-terminate: No such command 'no-such-command'."]
