"""The token goes only where it belongs: every request to ARM stays on the ARM endpoint's origin.

ARM answers carry links the SDK and our own loops follow: a list page's `nextLink`, an operation's
`Azure-AsyncOperation` and `Location`, a redirect's `Location`. Each of those requests carries the
bearer token, so an answer pointing elsewhere (another host, scheme or port) would hand the token to
whoever it names. One rule, enforced by one pipeline policy on every client the product builds for
ARM (compute, the subscription list and Resource Graph, which is the same origin): a request whose
origin (scheme, host, port) is not the endpoint's is refused before anything is sent to it, with
or without the header, naming the refused origin and the answer that carried the link.
"""

from __future__ import annotations

import json
import re
import threading
from collections import OrderedDict
from typing import Any, Dict, Optional, Tuple
from urllib.parse import urlsplit

from vmss_terminate.errors import AzureError

Origin = Tuple[str, str, int]

LINK_HEADERS = ("Azure-AsyncOperation", "Location", "Operation-Location")
_NEXT_LINK = re.compile(rb'"(nextLink|@odata\.nextLink)"\s*:\s*"((?:[^"\\]|\\.)*)"')
_REMEMBERED = 256


class ForeignLinkRefused(AzureError):
    """An answer pointed a request at another origin than the ARM endpoint's; nothing was sent."""


def origin_of(url: str) -> Origin:
    """(scheme, host, port) with the scheme's default port filled in; host in lower case."""
    try:
        parts = urlsplit(url)
    except ValueError:  # e.g. "http://[::1": no origin at all, so never the endpoint's
        return "", "", 0
    scheme = parts.scheme.lower()
    try:
        port = parts.port
    except ValueError:
        port = None
    return scheme, (parts.hostname or "").lower(), port or (443 if scheme == "https" else 80)


def _path(url: str) -> str:
    try:
        return urlsplit(url).path
    except ValueError:
        return url


def origin_text(url: str) -> Optional[str]:
    """`scheme://netloc` as written at the start of `url` (the netloc ends at the first '/', '?' or
    '#', as urlsplit reads it), or None when the URL has no such plain form. Two URLs with the same
    text have the same origin: a key under which a check's answer can be remembered."""
    scheme, sep, rest = url.partition("://")
    if not sep or not scheme.isalpha():
        return None
    end = len(rest)
    for mark in "/?#":
        found = rest.find(mark)
        if 0 <= found < end:
            end = found
    netloc = rest[:end]
    if not netloc or not netloc.isprintable() or "\\" in netloc:
        return None
    return f"{scheme}://{netloc}"


def show_origin(origin: Origin) -> str:
    scheme, host, port = origin
    host = f"[{host}]" if ":" in host else host
    default = 443 if scheme == "https" else 80
    return f"{scheme}://{host}" + ("" if port == default else f":{port}")


class OriginGuard:
    """The rule's state for one client: the allowed origin, and where each foreign link was seen
    (so a refusal names the answer that carried it). Safe to share between threads."""

    def __init__(self, base_url: str) -> None:
        self.origin = origin_of(base_url)
        self._carriers: "OrderedDict[Tuple[Origin, str], str]" = OrderedDict()
        self._lock = threading.Lock()
        self._allowed: Dict[str, bool] = {}  # origin_text -> on the endpoint's origin (parsed once per text)

    def allows(self, url: str) -> bool:
        """Whether `url` is on the ARM endpoint's origin. Every request and link is checked; the
        answer is remembered per `origin_text` (a client meets a handful), not parsed again."""
        text = origin_text(url)
        allowed = self._allowed.get(text) if text is not None else None
        if allowed is None:
            allowed = origin_of(url) == self.origin
            if text is not None and len(self._allowed) < _REMEMBERED:
                self._allowed[text] = allowed
        return allowed

    def check(self, method: str, url: str) -> None:
        """Raise ForeignLinkRefused unless `url` is on the ARM endpoint's origin."""
        if self.allows(url):
            return
        origin = origin_of(url)
        with self._lock:
            carrier = self._carriers.get((origin, _path(url)))
        raise self._refused(origin, carrier or "a link in an answer ARM sent")

    def check_link(self, link: str, carrier: str) -> None:
        """Raise ForeignLinkRefused if `link` (found in `carrier`, e.g. "the Location header of the
        answer to POST ...") points off the ARM endpoint's origin: for links a caller reads itself,
        checked before it follows any of them."""
        if not self.allows(link):
            raise self._refused(origin_of(link), carrier)

    def _refused(self, origin: Origin, carrier: str) -> ForeignLinkRefused:
        return ForeignLinkRefused(
            f"refused to follow a link to {show_origin(origin)}, which is not the ARM endpoint "
            f"({show_origin(self.origin)}): {carrier} points there; nothing was sent to it (the token goes only "
            "to the ARM endpoint's origin)")

    def seen(self, method: str, url: str, status: int, headers: Any, body: Optional[bytes]) -> None:
        """Remember the foreign links an answer carries (headers, and a page's nextLink)."""
        def answer() -> str:  # named only for a foreign link: most answers carry none
            return f"the answer to {method} {urlsplit(url).path} (HTTP {status})"

        for name in LINK_HEADERS:
            value = headers.get(name)
            if value and not self.allows(str(value)):
                self._remember(str(value), f"the {name} header of {answer()}")
        if body and b"extLink" in body:
            for key, raw in _NEXT_LINK.findall(body):
                try:
                    link = json.loads(b'"' + raw + b'"')
                except ValueError:
                    continue
                if not self.allows(str(link)):
                    self._remember(str(link), f"the {key.decode()} of {answer()}")

    def _remember(self, link: str, carrier: str) -> None:
        origin = origin_of(link)
        if origin == self.origin or not origin[1]:
            return
        with self._lock:
            self._carriers[(origin, _path(link))] = carrier
            while len(self._carriers) > _REMEMBERED:
                self._carriers.popitem(last=False)


def arm_origin_policy(base_url: str) -> Any:
    """The azure-core policy enforcing the rule: a per-retry policy, so it sees every attempt, every
    redirect hop, every page and every operation poll before the request reaches the transport."""
    from azure.core.pipeline.policies import SansIOHTTPPolicy

    guard = OriginGuard(base_url)

    class ArmOriginOnly(SansIOHTTPPolicy[Any, Any]):
        def on_request(self, request: Any) -> None:
            http = request.http_request
            guard.check(http.method, http.url)

        def on_response(self, request: Any, response: Any) -> None:
            http = response.http_response
            body: Optional[bytes] = None
            if http.status_code == 200 and "json" in (http.headers.get("Content-Type") or ""):
                try:
                    body = http.body()
                except Exception:  # a streamed body: no page links to read here
                    body = None
            guard.seen(request.http_request.method, request.http_request.url, http.status_code, http.headers, body)

    return ArmOriginOnly()
