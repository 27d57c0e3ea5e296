"""`--webhook-format slack|teams`: chat messages saying which VM, which event, NotBefore and what the
agent did, received by a loopback HTTP server; they never hold the approval back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Iterator, List

import pytest
from webhook_receiver import Receiver

from vmss_terminate.errors import UsageError
from vmss_terminate.pipeline import decisions as D

from .conftest import VM, Imds, make_agent, run_cli, wait_until
from .test_hooks import probe


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    server = Receiver()
    yield server
    server.shutdown()
    server.server_close()


def _slack_text(body: Dict[str, Any]) -> str:
    return json.dumps(body)


def test_slack_messages_say_vm_event_not_before_and_what_happened(imds: Imds, receiver: Receiver) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    not_before = imds.group.events()[0].to_imds()["NotBefore"]
    agent = make_agent(imds.url, webhook=receiver.url, webhook_format="slack")
    agent.run_once(retry_for=0)
    assert wait_until(lambda: len(receiver.bodies) >= 2)
    draining, approved = receiver.bodies[:2]
    for body in (draining, approved):
        text = _slack_text(body)
        assert VM in text and eid in text and not_before in text and "Terminate" in text
        assert body["text"] and body["blocks"][0]["type"] == "section"
    assert "draining" in draining["text"] and "approved" in approved["text"]
    fields = {f["text"].split("\n")[0]: f["text"].split("\n")[1] for f in approved["blocks"][1]["fields"]}
    assert fields["*Action*"] == "approved" and fields["*VM*"] == VM and fields["*NotBefore*"] == not_before
    assert imds.approved_ids() == [eid]


def test_teams_message_is_an_adaptive_card_and_reports_a_failed_hook(imds: Imds, receiver: Receiver,
                                                                      tmp_path: Path) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    agent = make_agent(imds.url, webhook=receiver.url, webhook_format="teams",
                       hooks=[probe(tmp_path / "out", "exit", "3")])
    agent.run_once(retry_for=0)
    assert wait_until(lambda: len(receiver.bodies) >= 3)
    actions = []
    for body in receiver.bodies:
        assert body["type"] == "message"
        card = body["attachments"][0]
        assert card["contentType"] == "application/vnd.microsoft.card.adaptive"
        facts = {f["title"]: f["value"] for f in card["content"]["body"][1]["facts"]}
        assert facts["VM"] == VM and facts["Event"] == f"Terminate {eid}" and facts["NotBefore"].endswith("GMT")
        actions.append(facts["Action"])
    assert actions == ["draining", "hook failed", "approved"]  # --on-hook-failure approve (the default)


def test_a_failing_chat_webhook_never_holds_the_approval(imds: Imds) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    broken = Receiver(status=500)
    try:
        agent = make_agent(imds.url, webhook=broken.url, webhook_format="slack")
        decisions: List[str] = []
        agent.subscribe(lambda d: decisions.append(d.kind))
        agent.run_once(retry_for=0)
        assert imds.approved_ids() == [eid]
        assert D.HOOK_FAILED not in decisions and D.HOOK_STARTED not in decisions  # not a hook step
    finally:
        broken.shutdown()
        broken.server_close()


def test_the_webhook_token_never_reaches_the_log(imds: Imds) -> None:
    imds.group.add_event("Terminate", [VM])
    done = run_cli("run", "--once", "--imds-url", imds.url, "--state-file", ":memory:",
                   "--webhook", "http://127.0.0.1:9/services/secret-token", "--webhook-format", "teams")
    assert done.returncode == 0, done.stderr
    assert "secret-token" not in done.stderr and "secret-token" not in done.stdout


def test_unknown_webhook_format_is_refused() -> None:
    with pytest.raises(UsageError):
        make_agent("http://127.0.0.1:9", webhook="http://127.0.0.1:9/x", webhook_format="discord")


def test_chat_notifier_forgets_events_that_left_the_document(imds: Imds) -> None:
    """A months-long agent must not keep every EventId it ever saw (foreign ones included)."""
    from vmss_terminate.pipeline.notify import ChatNotifier

    foreign = imds.group.add_event("Reboot", ["myvmss_4"])
    agent = make_agent(imds.url, approve_types="none")
    notifier = ChatNotifier("http://127.0.0.1:9/hook", "slack")  # sends nothing: no action decided
    agent.subscribe(notifier)
    try:
        agent.poll(retry_for=0)
        assert foreign in notifier._events
        imds.group.remove_event(foreign)
        agent.poll(retry_for=0)
        assert notifier._events == {}
    finally:
        notifier.close()
