"""`--help` is printed from the text click renders (commands/helptexts.py), importing no command
module and not click itself (issue 29: `status --help` imported the control plane); the text is
click's own, for every command, and a terminal narrower than 80 columns still gets click."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from typing import Dict, List

import pytest

from vmss_terminate.commands import helpcache, helptexts


def _run(args: List[str], columns: int, code: str = "") -> "subprocess.CompletedProcess[str]":
    env = dict(os.environ, COLUMNS=str(columns))
    return subprocess.run([sys.executable, "-c", code or "from vmss_terminate.entry import main; main()", *args],
                          capture_output=True, text=True, env=env, timeout=120)


def test_the_kept_text_is_what_click_renders_for_every_command() -> None:
    # rendered in a fresh interpreter, as the console script runs: the root's listing summarises a
    # command from its registration until its module is imported, which other tests here have done
    fresh = _run([], 80, "import json, sys\nfrom vmss_terminate.cli import main\n"
                         "from vmss_terminate.commands.helpcache import rendered\n"
                         "sys.stdout.write(json.dumps(rendered(main)))")
    assert fresh.returncode == 0, fresh.stderr
    rendered = json.loads(fresh.stdout)
    assert set(rendered) >= {"", "status", "enable", "fleet", "fleet audit", "fleet rollout", "agent run"}
    stale = sorted(key or "(root)" for key in rendered if helptexts.HELP.get(key) != rendered[key])
    stale += sorted(key for key in helptexts.HELP if key not in rendered)
    assert not stale, f"help changed for {stale}: run python -m vmss_terminate.cli --help-cache"


@pytest.mark.parametrize("words", [[], ["status"], ["fleet", "rollout"], ["agent", "run"]])
def test_the_console_script_prints_clicks_help_without_importing_it(words: List[str]) -> None:
    probe = ("import sys\nfrom vmss_terminate.entry import main\ntry:\n    main()\nexcept SystemExit as exc:\n"
             "    loaded = [m for m in sys.modules if m == 'click' or m.startswith(('vmss_terminate.control', "
             "'vmss_terminate.fleet', 'vmss_terminate.agent', 'vmss_terminate.commands.control'))]\n"
             "    sys.stderr.write(repr(loaded))\n    raise\n")
    cached = _run([*words, "--help"], 80, probe)
    assert cached.returncode == 0, cached.stderr
    assert cached.stderr == "[]"  # nothing but the text
    live = _run([*words, "--help"], 80, "import sys\nfrom vmss_terminate.cli import main as cli\n"
                                         "cli(sys.argv[1:], prog_name='vmss-terminate')")
    assert live.returncode == 0 and cached.stdout == live.stdout


def test_a_narrow_terminal_and_other_arguments_go_to_click() -> None:
    narrow = _run(["status", "--help"], 60)
    assert narrow.returncode == 0 and narrow.stdout != helptexts.HELP["status"]
    assert max(len(line) for line in narrow.stdout.splitlines()) <= 58  # click wrapped it to the terminal
    with_values = _run(["status", "-g", "rg", "--help"], 80)  # click decides what this prints
    assert with_values.returncode == 0 and with_values.stdout == helptexts.HELP["status"]


def test_only_help_words_are_looked_up() -> None:
    from vmss_terminate.entry import cached_help

    asked: Dict[str, object] = {
        "status --help": cached_help(["status", "--help"]),
        "status": cached_help(["status"]),
        "status -g rg --help": cached_help(["status", "-g", "rg", "--help"]),
        "no-such --help": cached_help(["no-such", "--help"]),
    }
    if helpcache.MIN_COLUMNS <= __import__("shutil").get_terminal_size().columns:
        assert asked["status --help"] == helptexts.HELP["status"]
    assert asked["status"] is None and asked["status -g rg --help"] is None and asked["no-such --help"] is None
