"""Every ARM listing ends: a page link already followed is a paging loop, and a listing has at most
`MAX_PAGES` pages.

ARM pages lists (`nextLink`); an answer whose `nextLink` points back at a page already read would
otherwise be followed forever. `PageGuard` is told each page's next link before it is followed and
refuses a link it has seen (exit 1, "paging loop at ...") or a page past the cap (exit 1). Links are
compared as ARM compares them: scheme and host case-insensitively, query parameters in any order.
"""

from __future__ import annotations

from typing import Optional, Set, Tuple
from urllib.parse import parse_qsl, urlsplit

from vmss_terminate.errors import AzureError

MAX_PAGES = 1000
"""Pages one listing may have: a scale set's instance list (up to 1,000 VMs) takes a handful, the
subscriptions a tenant sees a few dozen at the most; past this the answer is not believed."""


class PagingLoop(AzureError):
    """A listing's next link was one already followed, or the listing passed MAX_PAGES pages."""


def _key(link: str) -> Tuple[str, str, str, Tuple[Tuple[str, str], ...]]:
    parts = urlsplit(link)
    return (parts.scheme.lower(), parts.netloc.lower(), parts.path,
            tuple(sorted(parse_qsl(parts.query, keep_blank_values=True))))


class PageGuard:
    """The links one listing followed (`what` names the listing in messages)."""

    def __init__(self, what: str, max_pages: int = MAX_PAGES) -> None:
        self.what = what
        self.max_pages = max_pages
        self.pages = 0
        self._followed: Set[Tuple[str, str, str, Tuple[Tuple[str, str], ...]]] = set()

    def next_link(self, link: Optional[str]) -> Optional[str]:
        """Called once per page read, with that page's next link (None at the end): returns the
        link when it may be followed, else raises PagingLoop before anything is sent to it."""
        self.pages += 1
        if not link:
            return None
        key = _key(link)
        if key in self._followed:
            raise PagingLoop(f"{self.what}: paging loop at {link}: page {self.pages} named a next link already "
                             "followed; stopped instead of reading it again")
        if self.pages >= self.max_pages:
            raise PagingLoop(f"{self.what}: more than {self.max_pages} pages (the cap on one listing); stopped at "
                             f"{link}")
        self._followed.add(key)
        return link
