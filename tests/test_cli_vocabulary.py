"""The CLI-wide vocabulary: `-o table|json|tsv` everywhere, one error line (plus a JSON object with
-o json), exit 2 for every kind of bad invocation, refused repeats, Ctrl-C = 130."""

from __future__ import annotations

import json
import os
import subprocess

import click
import pytest
from clifork import run_forked
from helpers import invoke_cli

from vmss_terminate import cli
from vmss_terminate.commands.options import BATCH_SIZE, TIMEOUT
from vmss_terminate.commands.output import requested_output, tsv_lines
from vmss_terminate.errors import AzureError


def _cli(*args: str) -> "subprocess.CompletedProcess[str]":
    """`python -m vmss_terminate ARGS` as a process, forked from a warm interpreter (tests/clifork.py)."""
    return run_forked(list(args), os.environ, os.getcwd(), timeout=60)


def test_unknown_root_option_is_one_error_line_exit_2() -> None:
    proc = _cli("--bogus")
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: vmss-terminate: No such option '--bogus'."]
    assert proc.stdout == ""


def test_every_output_option_speaks_table_json_tsv() -> None:
    """One vocabulary: every command that has -o offers exactly table|json|tsv (text still accepted)."""
    from vmss_terminate.commands.output import OutputFormat

    found = []

    def walk(command: click.Command, path: str) -> None:
        for param in command.params:
            if "--output" in getattr(param, "opts", []):
                found.append(path)
                assert isinstance(param.type, OutputFormat), path
                assert param.default == "table", path
        if isinstance(command, click.Group):  # the root is lazy: ask it, do not read .commands
            ctx = click.Context(command)
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                walk(sub, f"{path} {name}")

    walk(cli.main, "vmss-terminate")
    for expected in ("status", "enable", "plan", "upgrade", "demo", "sandbox", "agent events", "agent approve"):
        assert f"vmss-terminate {expected}" in found
    assert OutputFormat().convert("text", None, None) == "table"
    assert OutputFormat().convert("TSV", None, None) == "tsv"


@click.command("probe-vocabulary")
@click.option("--fail", is_flag=True)
@click.option("--crash", is_flag=True)
@click.option("--timeout", type=TIMEOUT)
@click.option("--batch-size", type=BATCH_SIZE)
@click.option("-n", "--name")
@click.option("-o", "--output", default="table")
def _probe(fail: bool, crash: bool, timeout: int, batch_size: object, name: str, output: str) -> None:
    if crash:
        raise RuntimeError("surprise\nfrom deep inside")
    if fail:
        raise AzureError("ResourceNotFound: nope")
    click.echo(f"ok {name}")


@pytest.fixture
def probe():  # type: ignore[no-untyped-def]
    cli.main.add_command(_probe)
    from vmss_terminate.commands.options import refuse_repeated_options

    refuse_repeated_options(_probe)
    yield lambda *args: invoke_cli(cli.main, ["probe-vocabulary", *args], prog_name="vmss-terminate")
    cli.main.commands.pop("probe-vocabulary", None)


def test_json_errors_are_one_line_then_a_json_object_on_stderr(probe) -> None:  # type: ignore[no-untyped-def]
    result = probe("--fail", "-o", "json")
    assert result.exit_code == 1 and result.stdout == ""
    line, obj = result.stderr.strip().splitlines()
    assert line == "error: ResourceNotFound: nope"
    assert json.loads(obj) == {"error": {"message": "ResourceNotFound: nope", "type": "azure", "exit_code": 1}}
    usage = probe("--timeout", "99", "--output=json")
    assert usage.exit_code == 2
    assert json.loads(usage.stderr.strip().splitlines()[1])["error"]["type"] == "usage"
    assert probe("--fail").stderr.strip().splitlines() == ["error: ResourceNotFound: nope"]  # table: one line


def test_parse_errors_follow_the_requested_output_too() -> None:
    proc = _cli("status", "--bogus", "-o", "json")
    assert proc.returncode == 2
    line, obj = proc.stderr.strip().splitlines()
    assert line.startswith("error: vmss-terminate status: No such option")
    assert json.loads(obj)["error"]["exit_code"] == 2
    assert requested_output(["-ojson"]) == "json" and requested_output(["--output", "text"]) == "table"
    assert requested_output(["--", "-o", "json"]) == "table"


def test_repeated_single_value_option_is_refused(probe) -> None:  # type: ignore[no-untyped-def]
    result = probe("-n", "a", "-n", "b")
    assert result.exit_code == 2
    assert result.stderr.strip() == "error: vmss-terminate probe-vocabulary: --name given more than once"
    assert probe("-n", "a").stdout.strip() == "ok a"
    real = invoke_cli(cli.main, ["status", "-g", "rg", "-n", "a", "--name", "b"])
    assert real.exit_code == 2 and "--name given more than once" in real.stderr


def test_option_values_are_named_once_not_garbled(probe) -> None:  # type: ignore[no-untyped-def]
    """The value and the option appear once: no "Invalid value for '--batch-size': invalid --batch-size"."""
    batch = probe("--batch-size", "-1")
    assert batch.stderr.strip() == ("error: vmss-terminate probe-vocabulary: invalid --batch-size '-1': use auto, a count "
                                    "(5) or a percentage (20%)")
    timeout = probe("--timeout", "20m")
    assert timeout.stderr.strip().startswith("error: vmss-terminate probe-vocabulary: invalid --timeout '20m': must be")


def test_tsv_is_scalar_fields_like_az() -> None:
    assert tsv_lines({"a": 1, "b": None, "c": {"x": 1}, "d": "t\tab", "e": True}) == ["1\t\tt ab\tTrue"]
    assert tsv_lines([{"a": 1}, {"a": 2}]) == ["1", "2"]


def test_an_unexpected_exception_is_one_line_exit_1_not_a_traceback(probe, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    result = probe("--crash")
    assert result.exit_code == 1
    assert result.stderr.strip() == ("error: unexpected RuntimeError: surprise from deep inside "
                                     "(set VMSS_TERMINATE_DEBUG=1 for a traceback)")
    monkeypatch.setenv("VMSS_TERMINATE_DEBUG", "1")
    assert isinstance(probe("--crash").exception, RuntimeError)


@pytest.mark.parametrize("args, line", [
    (["--webhook", "notaurl"], "error: invalid --webhook: expected an http(s) URL such as https://HOST/PATH"),
    (["--webhook", "user:secret@host"], "error: invalid --webhook: expected an http(s) URL such as https://HOST/PATH"),
    (["--request-timeout", "0"], "error: invalid --request-timeout 0: expected 0 < seconds <= 3600"),
    (["--poll-interval", "nan"], "error: invalid --poll-interval nan: expected a number of seconds"),
    (["--on-hook-failure", "maybe"], None),
])
def test_agent_option_errors_name_the_option_and_value_once(args: list, line: object) -> None:
    result = invoke_cli(cli.main, ["agent", "run", "--once", "--imds-url", "http://127.0.0.1:9",
                                   "--state-file", ":memory:", *args])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "secret" not in lines[0] and "://notaurl" not in lines[0]
    if line is not None:
        assert lines[0] == line
