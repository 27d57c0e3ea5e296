"""Every ARM listing ends: a page link already followed is a paging loop, and a listing has at most
`MAX_PAGES` pages.

ARM pages lists (`nextLink`); an answer whose `nextLink` points back at a page already read would
otherwise be followed forever. `PageGuard` is told each page's next link before it is followed and
refuses a link it has seen (exit 1, "paging loop at ...") or a page past the cap (exit 1). Links are
compared as ARM compares them: scheme and host case-insensitively, query parameters in any order.

A next link is the answer's, not the listed resources': one that is not an absolute http(s) URL,
points off the ARM endpoint's origin, or that ARM itself refuses when it is followed (400, 404, 410)
is `BadPageLink` naming the list being read and the link -- never "scale set not found" (a 404 on a
page link used to be read as the scale set's own 404).
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator, Optional, Set, Tuple
from urllib.parse import parse_qsl, urlsplit

from vmss_terminate.control.arm_errors import describe_arm_error
from vmss_terminate.control.origin import ForeignLinkRefused, OriginGuard
from vmss_terminate.errors import AzureError

MAX_PAGES = 1000
"""Pages one listing may have: a scale set's instance list (up to 1,000 VMs) takes a handful, the
subscriptions a tenant sees a few dozen at the most; past this the answer is not believed."""


class PagingLoop(AzureError):
    """A listing's next link was one already followed, or the listing passed MAX_PAGES pages."""


class BadPageLink(AzureError):
    """A page's next link could not be followed: malformed, or refused by ARM when followed."""


REFUSED_LINK_STATUSES = (400, 404, 410)
"""What ARM answers to a page link it does not know (a bad or expired continuation token, a path
that names nothing): the link is at fault, not the resources being listed."""

AFTER = ("run the command again (a next link ARM does not accept is a fault in ARM's answer, not in the "
         "resources listed)")


def _shown(link: str) -> str:
    return repr(link if len(link) <= 200 else link[:200] + "...")


def malformed(link: str) -> Optional[str]:
    """Why `link` cannot be a page link (None when it is an absolute http(s) URL with a host)."""
    try:
        parts = urlsplit(link)
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError as exc:
        return f"not a URL ({exc})"
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        return "not an absolute http(s) URL"
    return None


def _key(link: str) -> Tuple[str, str, str, Tuple[Tuple[str, str], ...]]:
    parts = urlsplit(link)
    return (parts.scheme.lower(), parts.netloc.lower(), parts.path,
            tuple(sorted(parse_qsl(parts.query, keep_blank_values=True))))


class PageGuard:
    """The links one listing followed (`what` names the listing in messages)."""

    def __init__(self, what: str, max_pages: int = MAX_PAGES, origin: Optional[OriginGuard] = None) -> None:
        self.what = what
        self.max_pages = max_pages
        self.origin = origin
        self.pages = 0
        self.link: Optional[str] = None  # the next link being followed (None on the first page)
        self._followed: Set[Tuple[str, str, str, Tuple[Tuple[str, str], ...]]] = set()

    def next_link(self, link: Optional[str], answer: str = "") -> Optional[str]:
        """Called once per page read, with that page's next link (None at the end) and `answer`
        naming the answer that carried it ("GET /path (HTTP 200)"): returns the link when it may be
        followed, else raises (PagingLoop, BadPageLink, ForeignLinkRefused) before anything is sent."""
        self.pages += 1
        if not link:
            self.link = None
            return None
        carrier = f"the nextLink of {f'the answer to {answer}' if answer else f'page {self.pages}'}"
        why = malformed(link)
        if why:
            raise BadPageLink(f"{self.what}: {carrier} is {_shown(link)}: {why}; not followed; {AFTER}")
        if self.origin is not None:
            try:
                self.origin.check_link(link, carrier)
            except ForeignLinkRefused as exc:
                raise ForeignLinkRefused(f"{self.what}: {exc}") from None
        key = _key(link)
        if key in self._followed:
            raise PagingLoop(f"{self.what}: paging loop at {link}: page {self.pages} named a next link already "
                             "followed; stopped instead of reading it again")
        if self.pages >= self.max_pages:
            raise PagingLoop(f"{self.what}: more than {self.max_pages} pages (the cap on one listing); stopped at "
                             f"{link}")
        self._followed.add(key)
        self.link = link
        return link

    @contextmanager
    def reading(self) -> Iterator[None]:
        """Around each page's request: ARM refusing a next link (400, 404, 410: an unknown or
        expired link) is BadPageLink naming the list and the link, not the listed resource's error."""
        from azure.core.exceptions import HttpResponseError

        try:
            yield
        except HttpResponseError as exc:
            status = getattr(exc, "status_code", None)
            if self.link is None or status not in REFUSED_LINK_STATUSES:
                raise
            raise BadPageLink(f"{self.what}: ARM refused the nextLink of page {self.pages} ({_shown(self.link)}): "
                              f"{describe_arm_error(exc)}; {AFTER}") from None
