"""Issue 20 item 14: the help and the docs say what the program does -- every option described,
summaries never cut mid-sentence, exit codes in every command's `--help`, the docs' exit codes and
csv columns as the program has them."""

from __future__ import annotations

import csv
import io
import json
import re
from pathlib import Path
from typing import Tuple

import click
import pytest
from helpers import invoke_cli

from vmss_terminate.cli import main
from vmss_terminate.commands.docgen import walk

DOCS = Path(__file__).resolve().parents[1] / "docs"
COMMANDS = [path for path, command in walk(main) if not isinstance(command, click.Group)]


def test_every_option_has_a_description() -> None:
    missing = [f"{' '.join(path)} {max(param.opts, key=len)}" for path, command in walk(main)
               for param in command.params
               if isinstance(param, click.Option) and not (param.help or "").strip() and param.name != "help"]
    assert missing == []


def test_help_listings_show_whole_summaries() -> None:
    for args in ([], ["fleet"], ["emulator"], ["agent"]):
        text = invoke_cli(main, [*args, "--help"]).output
        listing = text.split("Commands:", 1)[1]
        assert "..." not in listing, listing
        entries = re.split(r"\n  (?=\S)", listing.strip())
        assert all(" ".join(entry.split()).endswith((".", ")")) for entry in entries), entries


@pytest.mark.parametrize("path", COMMANDS, ids=lambda p: " ".join(p[1:]))
def test_every_command_help_states_its_exit_codes(path: Tuple[str, ...]) -> None:
    text = " ".join(invoke_cli(main, [*path[1:], "--help"]).output.split())
    assert "Exit codes: 0 " in text and "2 bad input" in text, text[-300:]
    serving = path[1:] in {("agent", "run"), ("emulator", "arm"), ("emulator", "imds"), ("emulator", "kube"),
                           ("sandbox",)}
    assert ("0 stopped by Ctrl-C or SIGTERM" in text) == serving


def test_control_plane_doc_gives_the_exit_code_of_an_unknown_subscription_name() -> None:
    text = " ".join((DOCS / "control-plane.md").read_text().split())
    assert "no match is exit 2" in text and "no match is exit 1" not in text


def test_fleet_csv_has_every_json_field(monkeypatch: pytest.MonkeyPatch, shared_arm: object) -> None:
    from helpers import serve_arm_state

    from vmss_terminate_sim.emulator.arm.app import ArmState

    state = ArmState()
    sub = "11111111-0000-0000-0000-000000000001"
    state.add_subscription(sub, "Prod")
    state.add_scale_set(sub, "rg", "web", capacity=1, tags={"env": "prod", "team": "a;b"})
    serve_arm_state(shared_arm, state, monkeypatch)
    as_json = json.loads(invoke_cli(main, ["fleet", "audit", "--subscription", sub, "-o", "json"]).stdout)
    rows = list(csv.DictReader(io.StringIO(invoke_cli(main, ["fleet", "audit", "--subscription", sub,
                                                             "-o", "csv"]).stdout)))
    assert len(rows) == 1 and set(rows[0]) == set(as_json[0])
    assert json.loads(rows[0]["tags"]) == {"env": "prod", "team": "a;b"}
    assert "`tags` as a JSON object" in (DOCS / "fleet.md").read_text()
