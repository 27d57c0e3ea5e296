"""`agent run` starts without click, from the same option definitions as the click command: both
read every command line alike, refuse the same bad ones, and end in the same `run()`."""

from __future__ import annotations

import os
import subprocess
import sys
from typing import List

import click
import pytest

from vmss_terminate.agent.command import RUN_OPTIONS, ArgumentError, parse_args
from vmss_terminate.commands.agent import run_command

from .conftest import REPO, VM, Imds

GOOD = [
    [],
    ["--once", "--hook", "a b", "--hook=c", "--poll-interval", "0.5", "--approve", "Reboot", "--approve-shared"],
    ["--imds-url=http://127.0.0.1:1", "--api-version", "latest", "--listen", "9100", "--drain-delay", "25",
     "--webhook", "http://x/y", "--webhook-format", "teams", "--log-format", "json", "--no-rerun-interrupted",
     "--on-hook-failure", "wait", "--safety-margin", "5", "--vm-name", "vm_1", "--request-timeout", "3",
     "--first-call-timeout", "9", "--stop-grace", "3", "--state-file", ":memory:", "--hook-events", "all"],
]
BAD = [["--nope"], ["--poll-interval"], ["--poll-interval", "soon"], ["--log-format", "yaml"],
       ["--once=yes"], ["--vm-name", "a", "--vm-name", "b"], ["extra"]]


def _click_params(argv: List[str]) -> dict:
    with run_command.make_context("run", list(argv)) as ctx:
        return dict(ctx.params)


@pytest.mark.parametrize("argv", GOOD, ids=range(len(GOOD)))
def test_both_parsers_read_a_command_line_alike(argv: List[str]) -> None:
    ours, _ = parse_args(argv)
    theirs = _click_params(argv)
    assert ours == {k: (tuple(v) if isinstance(v, (list, tuple)) else v) for k, v in theirs.items()}


@pytest.mark.parametrize("argv", BAD, ids=lambda a: " ".join(a))
def test_both_parsers_refuse_the_same_command_lines(argv: List[str]) -> None:
    with pytest.raises(ArgumentError):
        parse_args(argv)
    from vmss_terminate.commands.lazy import refuse_repeated_options  # the CLI root installs it

    refuse_repeated_options(run_command)
    with pytest.raises(click.UsageError):
        _click_params(argv)


def test_every_option_is_in_the_click_command() -> None:
    assert [p.name for p in run_command.params] == [o.dest for o in RUN_OPTIONS]


def _entry(*args: str) -> "subprocess.CompletedProcess[str]":
    code = ("import sys\nfrom vmss_terminate.entry import main\n"
            "try:\n    main(sys.argv[1:])\nexcept SystemExit as exc:\n    code = exc.code\n"
            "print('CLICK' if 'click' in sys.modules else 'NO-CLICK', code)\n")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=60,
                          cwd=str(REPO))


def test_the_console_script_runs_the_agent_without_click(imds: Imds) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    done = _entry("agent", "run", "--once", "--imds-url", imds.url, "--state-file", ":memory:")
    assert done.stdout.split() == ["NO-CLICK", "0"], done.stderr
    assert imds.approved_ids() == [eid]


def test_bad_input_on_the_fast_path_is_one_line_exit_2() -> None:
    for args, words in [(["--poll-interval", "soon"], "vmss-terminate agent run: Invalid value for '--poll-interval'"),
                        (["--drain-delay", "-1"], "invalid --drain-delay"),
                        (["--nope"], "vmss-terminate agent run: No such option: --nope")]:
        done = _entry("agent", "run", "--imds-url", "http://127.0.0.1:9", *args)
        assert done.stdout.split() == ["NO-CLICK", "2"]
        assert done.stderr.startswith("error: ") and words in done.stderr and len(done.stderr.splitlines()) == 1


def test_help_and_other_commands_still_go_to_click() -> None:
    done = _entry("agent", "run", "--once", "--help")  # help among other arguments: click decides
    assert done.stdout.split()[-2:] == ["CLICK", "0"] and "--drain-delay" in done.stdout
    # `agent run --help` alone is click's text kept in commands/helptexts.py: printed without click
    kept = subprocess.run([sys.executable, "-c", "import sys\nfrom vmss_terminate.entry import main\n"
                           "try:\n    main(sys.argv[1:])\nexcept SystemExit as exc:\n    code = exc.code\n"
                           "print('CLICK' if 'click' in sys.modules else 'NO-CLICK', code)\n", "agent", "run", "--help"],
                          capture_output=True, text=True, timeout=60, cwd=str(REPO), env=dict(os.environ, COLUMNS="100"))
    assert kept.stdout.split()[-2:] == ["NO-CLICK", "0"] and "--drain-delay" in kept.stdout
