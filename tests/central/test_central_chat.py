"""`central run --webhook URL --webhook-format slack|teams`: a chat notice per handled event (seen,
failed actions, acknowledged or withheld), received by a loopback HTTP server; never a step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
from clifork import run_forked
from helpers import poll_until
from webhook_receiver import Receiver

from vmss_terminate.central.handler import HandlerConfig
from vmss_terminate.central.run import build
from vmss_terminate.clock import SYSTEM_CLOCK
from vmss_terminate.control import Connection
from vmss_terminate.fleet.scope import Scope
from vmss_terminate_sim.emulator.arm.app import ArmServers

from .conftest import SUB, Estate


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.shutdown()
    server.server_close()


def test_central_run_posts_slack_notices_seen_then_acknowledged(live_arm: ArmServers, live: Estate,
                                                                receiver: Receiver, tmp_path: Path) -> None:
    eid = live.groups["lin"].add_event("Terminate", ["lin_0", "lin_1"], not_before=SYSTEM_CLOCK.now() + 600)
    command = [sys.executable, "-m", "vmss_terminate", "central", "run", "--subscription", SUB, "--once",
               "--hook", f"{sys.executable} -c pass", "--webhook", receiver.url, "--webhook-format", "slack",
               "--state-file", str(tmp_path / "state.json")]
    result = subprocess.run(command, capture_output=True, text=True, timeout=120, env=dict(os.environ))
    assert result.returncode == 0, result.stderr
    assert [(a.event_id, a.accepted) for a in live.state.maintenance.acknowledgements] == [(eid, True)]
    assert len(receiver.bodies) == 2, receiver.bodies  # sent before the process exits
    seen, acknowledged = receiver.bodies
    for body in (seen, acknowledged):
        text = json.dumps(body)
        assert eid in text and "lin_0, lin_1" in text and "Terminate" in text
    assert "draining" in seen["text"] and "approved" in acknowledged["text"]
    assert f"approved Terminate {eid} for lin_0, lin_1" in json.dumps(acknowledged)
    assert "secret-token" not in result.stderr  # the chat URL's path is its token


def test_failed_action_and_withheld_acknowledgement_are_teams_cards(live_arm: ArmServers, live: Estate,
                                                                     receiver: Receiver, tmp_path: Path) -> None:
    eid = live.groups["lin"].add_event("Terminate", ["lin_1"], not_before=SYSTEM_CLOCK.now() + 600)
    config = HandlerConfig(hooks=(f"{sys.executable} -c \"raise SystemExit(3)\"",), webhook=receiver.url,
                           webhook_format="teams", on_failure="wait", poll_interval=0.05)
    central = build(Scope.build(subscriptions=[SUB]), config,
                    connection=Connection(arm_endpoint=live_arm.arm_url, retry_total=2, retry_backoff_factor=0.0))
    try:
        assert [e.event_id for e in central.handler.poll_once(wait=True)] == [eid]
    finally:
        central.close()
    assert live.state.maintenance.acknowledgements == []
    assert poll_until(lambda: len(receiver.bodies) == 3)
    cards: List[Dict[str, Any]] = [b["attachments"][0]["content"] for b in receiver.bodies]
    titles = [card["body"][0]["text"] for card in cards]
    assert titles == ["vmss-terminate on lin_1: draining", "vmss-terminate on lin_1: hook failed",
                      "vmss-terminate on lin_1: approval withheld"]
    facts = {f["title"]: f["value"] for f in cards[1]["body"][1]["facts"]}
    assert facts["Event"] == f"Terminate {eid}" and facts["Hook"].endswith("@lin_1 (failed)")
    assert f"not approving {eid}: a hook failed and --on-failure=wait" in cards[2]["body"][2]["text"]
    # central run's own option, not the agent's --on-hook-failure: the user can type what is named


def test_json_stays_the_default_and_chat_formats_are_the_agents(live_arm: ArmServers) -> None:
    result = run_forked(["central", "run", "--webhook-format", "xml"], os.environ, os.getcwd(), timeout=60)
    assert result.returncode == 2 and "json" in result.stderr and "teams" in result.stderr
