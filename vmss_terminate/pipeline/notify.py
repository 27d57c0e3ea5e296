"""Chat notifications (`--webhook URL --webhook-format slack|teams`): what the agent did, told to a
Slack or Microsoft Teams incoming webhook.

Unlike the `json` webhook (a hook step whose answer counts like a hook's), a chat notification
never holds the approval back: it is a DecisionBus subscriber that queues a message and a daemon
thread POSTs it (own session, so the environment's proxies apply; IMDS never uses one). Messages
say which VM, which event, its NotBefore and what happened: draining, hook failed, approved,
approval withheld. A chat webhook URL is a secret (Slack and Teams put the token in its path): only
its scheme and host are ever logged.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any, Dict, List, Optional, Tuple

from vmss_terminate.pipeline import decisions as D
from vmss_terminate.pipeline.decisions import Decision
from vmss_terminate.pipeline.hooks import redact_url, request_failure

log = logging.getLogger(__name__)

# decision kind -> (what the agent did, Slack emoji / Teams colour)
ACTIONS: Dict[str, Tuple[str, str, str]] = {
    D.DRAIN_STARTED: ("draining", ":hourglass_flowing_sand:", "Warning"),
    D.HOOK_FAILED: ("hook failed", ":x:", "Attention"),
    D.APPROVAL_SENT: ("approved", ":white_check_mark:", "Good"),
    D.APPROVAL_WITHHELD: ("approval withheld", ":warning:", "Warning"),
    D.SHARED_NOT_APPROVED: ("approval withheld (shared event)", ":warning:", "Warning"),
}


def facts(decision: Decision, event: Dict[str, Any]) -> List[Tuple[str, str]]:
    """The lines every message carries: VM, event, NotBefore, what the agent did."""
    hook, approval = decision.view(D.HookData), decision.view(D.ApprovalData)
    what = ACTIONS[decision.kind][0]
    rows = [("VM", decision.vm_name or "?"),
            ("Event", f"{event.get('type') or '?'} {decision.event_id or ''}".strip()),
            ("NotBefore", event.get("not_before") or "-"),
            ("Action", what)]
    if hook.get("hook"):
        rows.append(("Hook", f"{hook.get('hook')} ({hook.get('outcome', 'failed')})"))
    drained = approval.get("drain_seconds")
    if drained is not None:
        rows.append(("Drained for", f"{drained:g} s"))
    if event.get("source"):
        rows.append(("Source", str(event["source"])))
    return rows


def slack_payload(decision: Decision, event: Dict[str, Any]) -> Dict[str, Any]:
    """A Slack incoming-webhook message: `text` (notifications, fallbacks) plus a section of fields."""
    what, emoji, _ = ACTIONS[decision.kind]
    rows = facts(decision, event)
    title = f"{emoji} vmss-terminate on {decision.vm_name}: {what} ({event.get('type') or 'event'} {decision.event_id})"
    return {
        "text": title,
        "blocks": [
            {"type": "section", "text": {"type": "mrkdwn", "text": f"*{title}*"}},
            {"type": "section", "fields": [{"type": "mrkdwn", "text": f"*{k}*\n{v}"} for k, v in rows]},
            {"type": "context", "elements": [{"type": "mrkdwn", "text": decision.message}]},
        ],
    }


def teams_payload(decision: Decision, event: Dict[str, Any]) -> Dict[str, Any]:
    """A Teams message with an Adaptive Card (what Teams Workflows webhooks and incoming webhooks accept)."""
    what, _, colour = ACTIONS[decision.kind]
    title = f"vmss-terminate on {decision.vm_name}: {what}"
    return {
        "type": "message",
        "attachments": [{
            "contentType": "application/vnd.microsoft.card.adaptive",
            "content": {
                "type": "AdaptiveCard",
                "$schema": "http://adaptivecards.io/schemas/adaptive-card.json",
                "version": "1.4",
                "body": [
                    {"type": "TextBlock", "text": title, "weight": "Bolder", "size": "Medium", "color": colour,
                     "wrap": True},
                    {"type": "FactSet", "facts": [{"title": k, "value": v} for k, v in facts(decision, event)]},
                    {"type": "TextBlock", "text": decision.message, "isSubtle": True, "wrap": True},
                ],
            },
        }],
    }


PAYLOADS = {"slack": slack_payload, "teams": teams_payload}


def host_only(url: str) -> str:
    """`https://hooks.slack.com/...`: the path of a chat webhook is its token."""
    redacted = redact_url(url)
    scheme, sep, rest = redacted.partition("://")
    return f"{scheme}{sep}{rest.split('/', 1)[0]}/..." if sep else redacted


class ChatNotifier:
    """Subscribe to an agent's decisions (`agent.subscribe(notifier)`) and POST chat messages."""

    def __init__(self, url: str, fmt: str, timeout: float = 10.0, max_queue: int = 100) -> None:
        if fmt not in PAYLOADS:
            raise ValueError(f"unknown chat format {fmt!r}")
        self.url = url
        self.format = fmt
        self.timeout = timeout
        self.sent = 0
        self.failed = 0
        self._queue: "queue.Queue[Optional[Dict[str, Any]]]" = queue.Queue(max_queue)
        self._events: Dict[str, Dict[str, Any]] = {}  # EventId -> type / NotBefore / source, while present
        self._thread = threading.Thread(target=self._send_loop, name="chat-notifier", daemon=True)
        self._thread.start()

    def __call__(self, decision: Decision) -> None:
        eid = decision.event_id
        event = decision.view(D.EventData)
        if eid is not None and "event_type" in event:
            self._events[eid] = {"type": event.get("event_type"), "not_before": event.get("not_before"),
                                 "source": event.get("event_source")}
        if decision.kind == D.EVENT_GONE and eid is not None:
            self._events.pop(eid, None)  # the agent lives for months: forget what left the document
        if decision.kind not in ACTIONS:
            return
        payload = PAYLOADS[self.format](decision, self._events.get(eid or "", {}))
        try:
            self._queue.put_nowait(payload)
        except queue.Full:
            self.failed += 1
            log.warning("chat webhook %s: queue full, message dropped", host_only(self.url))

    def close(self, timeout: float = 5.0) -> None:
        """Send what is queued (up to `timeout` real seconds), then stop the sender."""
        try:
            self._queue.put(None, timeout=timeout)
        except queue.Full:
            return
        self._thread.join(timeout)

    def _send_loop(self) -> None:
        import requests

        session = requests.Session()
        while True:
            payload = self._queue.get()
            if payload is None:
                return
            try:
                response = session.post(self.url, json=payload, timeout=self.timeout)
                ok = 200 <= response.status_code < 300
                detail = f"HTTP {response.status_code}"
            except requests.RequestException as exc:
                ok, detail = False, request_failure(exc, self.timeout)
            if ok:
                self.sent += 1
            else:
                self.failed += 1
                log.warning("chat webhook %s failed: %s", host_only(self.url), detail)
