"""A requests Session that prepares and sends a plain request without requests' per-request merging.

Why: azure-core's RequestsTransport sends every ARM request through `Session.request`, which
merges the session's cookies, auth, params and hooks into each request through generic helpers
(`merge_setting`, `to_key_val_list`, `merge_cookies`; their `isinstance` checks against `typing`
protocols rebuild the protocol's attribute list on every call) and then looks at the answer for
cookies and redirects: the largest share of a request's client CPU in a 2,000-set rollout, for a
session that has nothing to merge (docs/benchmarks.md). Here a request with nothing to merge --
no cookies in the jar or the call, no auth, params, files, json or hooks, `trust_env` off,
redirects not followed: what azure-core sends through the transports of `control/pipeline.py` --
is prepared with requests' own `PreparedRequest` steps (method, URL, headers, body: the same bytes
on the wire, `tests/control/test_lean_session.py`) and sent through the same adapter; anything
else goes through `requests.Session.request` unchanged. An answer that sets a cookie is kept in
the jar as requests would, and every later request then takes requests' own path.
"""

from __future__ import annotations

from datetime import timedelta
from time import perf_counter
from typing import Any, Dict, Optional

import requests
from requests.cookies import RequestsCookieJar, extract_cookies_to_jar
from requests.models import PreparedRequest
from requests.structures import CaseInsensitiveDict

_PLAIN_BODIES = (bytes, str, type(None))
_MERGED = ("params", "cookies", "files", "auth", "hooks")
_SHORT_KEYWORDS = frozenset(("data", "headers", "timeout", "allow_redirects", "proxies", "stream", "verify", "cert",
                             "json", *_MERGED))


class LeanSession(requests.Session):
    """`requests.Session` with a short path for requests that have nothing to merge."""

    def request(self, method: Any, url: Any, **kwargs: Any) -> requests.Response:  # type: ignore[override]
        """`Session.request(method, url, **kwargs)`, the same keywords."""
        if not self._nothing_to_merge(url, kwargs):
            return super().request(method, url, **kwargs)
        data, headers = kwargs.get("data"), kwargs.get("headers")
        prepared = PreparedRequest()
        prepared.prepare_method(method)
        prepared.prepare_url(url, None)
        merged: CaseInsensitiveDict[Any] = CaseInsensitiveDict(self.headers)
        for name, value in (headers or {}).items():
            merged[name] = value
        prepared.prepare_headers({name: value for name, value in merged.items() if value is not None})
        prepared.prepare_body(data or None, None)
        if "@" in url.split("?", 1)[0]:
            prepared.prepare_auth(None, url)  # user:password@ in the URL, as requests reads it
        return self._send_prepared(prepared, timeout=kwargs.get("timeout"), proxies=kwargs.get("proxies"),
                                   stream=kwargs.get("stream"), verify=kwargs.get("verify"), cert=kwargs.get("cert"))

    def _nothing_to_merge(self, url: Any, kwargs: Dict[str, Any]) -> bool:
        """The short path's condition: a str URL, a plain body, redirects not followed, nothing
        else given (params, cookies, files, auth, hooks, json) and nothing in the session to merge."""
        return (isinstance(url, str) and set(kwargs) <= _SHORT_KEYWORDS and kwargs.get("allow_redirects") is False
                and isinstance(kwargs.get("data"), _PLAIN_BODIES) and not any(kwargs.get(k) for k in _MERGED)
                and kwargs.get("json") is None and not self.trust_env and not self.auth and not self.params
                and not len(self.cookies) and not any(self.hooks.values()))

    def _send_prepared(self, prepared: PreparedRequest, *, timeout: Any, proxies: Any, stream: Any, verify: Any,
                       cert: Any) -> requests.Response:
        """What `Session.send` does for a request without hooks or redirects to follow, with
        `trust_env` off: merge the session's proxies/stream/verify/cert, send through the URL's
        adapter, keep a cookie the answer sets and the redirect it names (`Response.next`)."""
        merged_proxies = {key: value for key, value in {**self.proxies, **(proxies or {})}.items() if value is not None}
        stream = self.stream if stream is None else stream
        verify = self.verify if verify is None else verify
        cert = self.cert if cert is None else cert
        adapter = self.get_adapter(url=str(prepared.url))
        started = perf_counter()
        response = adapter.send(prepared, stream=stream, timeout=timeout, verify=verify, cert=cert,
                                proxies=merged_proxies)
        response.elapsed = timedelta(seconds=perf_counter() - started)
        if "set-cookie" in response.headers:
            extract_cookies_to_jar(self.cookies, prepared, response.raw)  # type: ignore[no-untyped-call]
        if response.is_redirect:  # Response.next, as Session.send keeps it
            prepared._cookies = RequestsCookieJar()  # type: ignore[attr-defined]
            following: Optional[Any] = next(self.resolve_redirects(
                response, prepared, yield_requests=True, stream=stream, timeout=timeout, verify=verify, cert=cert,
                proxies=merged_proxies), None)
            if following is not None:
                response._next = following  # type: ignore[attr-defined]
        if not stream:
            response.content  # noqa: B018 -- read now, as requests does without stream
        return response
