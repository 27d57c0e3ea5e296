"""Subscriptions: `GET /subscriptions` (every page) and the one resolver of `--subscription NAME`.

Read through the pipeline of a client the command already has (compute or Resource Graph), so
the lookup uses the same credential, retries and transport rules as everything else.
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from vmss_terminate.control.arm_errors import arm_errors, describe_json, json_object
from vmss_terminate.control.origin import OriginGuard
from vmss_terminate.control.paging import PageGuard
from vmss_terminate.errors import AzureError, InvalidValue

SUBSCRIPTIONS_API_VERSION = "2022-12-01"


def lookup_subscription(compute: Any, name: str) -> str:
    """The id of the one subscription whose display name is `name`, read from `GET /subscriptions`
    through the compute client's own pipeline (same credential, retry and loopback rules)."""
    with arm_errors(f"looking up subscription {name!r}", name):
        seen = list_subscriptions(compute)
    return match_subscription(seen, name)


def match_subscription(visible: List[Dict[str, Any]], name: str) -> str:
    """The id of the one subscription in `visible` (a `GET /subscriptions` list) whose display name
    is `name` (case-insensitive). The one resolver of `--subscription NAME` for every command: none
    or several matches are bad input (exit 2) that list what the credential can see."""
    matches = [s for s in visible if str(s.get("displayName", "")).lower() == name.lower()]
    if len(matches) == 1 and matches[0].get("subscriptionId"):
        return str(matches[0]["subscriptionId"])
    if matches:
        ids = ", ".join(str(s.get("subscriptionId")) for s in matches)
        raise InvalidValue("subscription_id", name, f"{len(matches)} subscriptions have this name ({ids}): "
                           "pass the id", option="--subscription")
    shown = ", ".join(f"{s.get('displayName')} ({s.get('subscriptionId')})" for s in visible[:10]) or "none"
    if len(visible) > 10:  # thousands in an estate: a bounded line, and how many it left out
        shown += f" and {len(visible) - 10} more (`az account list` shows them all)"
    raise InvalidValue("subscription_id", name, f"no subscription named {name!r} is visible to this credential "
                       f"(visible: {shown})", option="--subscription")


def list_subscriptions(client: Any) -> List[Dict[str, Any]]:
    """Every subscription the credential sees (`GET /subscriptions`, all pages), through `client`'s
    own pipeline (any management client: same credential, retry and loopback rules). Call inside
    `arm_errors`."""
    from azure.core.rest import HttpRequest

    # an ArmClient (control/pipeline.py) and the generated clients have send_request, the
    # generated ResourceGraphClient only _send_request
    send = getattr(client, "send_request", None) or client._send_request
    seen: List[Dict[str, Any]] = []
    guard = PageGuard("listing subscriptions", origin=OriginGuard(client.base_url) if hasattr(client, "base_url") else None)
    url: Optional[str] = f"/subscriptions?api-version={SUBSCRIPTIONS_API_VERSION}"
    while url:
        with guard.reading():
            response = send(HttpRequest("GET", url))
            response.raise_for_status()
        page = json_object(response.text(), f"GET /subscriptions answered {response.status_code}")
        value = page.get("value") or []
        if not isinstance(value, list):
            raise AzureError(f"GET /subscriptions answered {describe_json(value)} for 'value' where a JSON list "
                             "was expected")
        seen.extend(item for item in value if isinstance(item, dict))
        link = page.get("nextLink")
        url = guard.next_link(link if isinstance(link, str) else None, f"GET /subscriptions (HTTP {response.status_code})")
    return seen
