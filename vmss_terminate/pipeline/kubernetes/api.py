"""The agent's Kubernetes HTTP helper: the few plain REST calls the node drain makes.

Like `ImdsClient` for IMDS, every Kubernetes request goes through this one class, by these rules:
- the credentials (`credentials.Access`) go only to the configured server's origin; redirects are
  never followed: a 3xx is `KubeRedirect`, naming the status and the Location's origin (a token is
  never forwarded elsewhere; the drain treats it as a configuration error, never retried);
- the bearer token is read again for every request (the projected service-account token rotates);
- TLS is verified against the cluster CA (or the system's); plain http only on loopback;
- proxies as kubectl takes them (Go's ProxyFromEnvironment): HTTPS_PROXY / NO_PROXY from the
  environment for an https server that is not loopback; never a proxy for a loopback host (a proxy
  cannot reach our loopback anyway) nor for a plain-http server (it would carry the bearer token in
  clear to the proxy); never .netrc;
- every request is bounded in total, connect to last byte (connect + read timeout), and inside
  `bounded(left, stop)` also by the time its caller has left (the drain: NotBefore minus the
  safety margin) and ended at once when `stop` is set (the agent stopping): a `Watch` shuts the
  socket, so an answer dripping a byte every few seconds can hold neither the drain past its
  deadline nor a worker thread past SIGTERM. An answer is capped in size;
- the bytes travel through a `transport` (a requests adapter), as `ImdsClient`'s do: by default
  `WatchedAdapter` (real sockets a `Watch` can cut); a test or an embedding program may pass its
  own (the emulator in process, no socket). Every rule above is this class's, whatever carries it;
- no retry here: the drain decides what to retry and until when (its deadline is NotBefore minus
  the safety margin), so one answer -> `Answer`, one failure on the wire -> `KubeError`.
"""

from __future__ import annotations

import json
import logging
import threading
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Callable, ContextManager, Dict, Iterator, Optional, Tuple
from urllib.parse import quote, urlsplit

import requests
import requests.adapters
import requests.utils

from vmss_terminate import __version__
from vmss_terminate.errors import VmssTerminateError
from vmss_terminate.net import is_loopback_url
from vmss_terminate.pipeline.kubernetes.credentials import Access
from vmss_terminate.pipeline.watched import Watch, WatchedAdapter

log = logging.getLogger(__name__)

MAX_BODY_BYTES = 32 << 20  # a pod list of a full node (110 pods) is a few MB
JSON = "application/json"
MERGE_PATCH = "application/merge-patch+json"


class KubeError(VmssTerminateError):
    """A request that got no usable answer (connection, timeout, redirect, unreadable body)."""


class KubeRedirect(KubeError):
    """The server answered a 3xx: never followed; the configured URL is not the API server."""


@dataclass(frozen=True)
class Answer:
    """One HTTP answer: the status and the JSON body (None when empty or not JSON)."""

    status: int
    body: Any = None

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    def message(self) -> str:
        """The Status object's message, for logs (never carries a credential)."""
        if isinstance(self.body, dict) and isinstance(self.body.get("message"), str):
            return f"{self.status} {self.body['message'][:300]}"
        return str(self.status)


def path(*segments: str) -> str:
    """`/api/v1/...` from segments, each percent-encoded."""
    return "/" + "/".join(quote(s, safe="") for s in segments)


class KubeApi:
    """Requests to one API server with one set of credentials."""

    def __init__(self, access: Access, connect_timeout: float = 5.0, read_timeout: float = 15.0,
                 session: Optional[requests.Session] = None,
                 transport: Optional[requests.adapters.BaseAdapter] = None) -> None:
        self.access = access
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self._session = session or requests.Session()
        self._adapter = transport or WatchedAdapter()
        for prefix in ("http://", "https://"):  # every request goes through the one transport
            self._session.mount(prefix, self._adapter)
        self._bounds = threading.local()  # .bound: (real seconds left or None, stop) of this thread's caller
        self._session.trust_env = False  # no .netrc: it could replace our Authorization header
        self._session.headers.update({"User-Agent": f"vmss-terminate/{__version__}", "Accept": JSON})
        self._proxies: Any = _proxies_for(access.server)

    @property
    def server(self) -> str:
        return self.access.server

    @contextmanager
    def bounded(self, left: Callable[[], Optional[float]], stop: Optional[threading.Event]) -> Iterator[None]:
        """This thread's requests end by `left()` real seconds from when each is sent (None: no
        limit but their own) and at once when `stop` is set. Nests: the inner bound holds inside."""
        previous = getattr(self._bounds, "bound", None)
        self._bounds.bound = (left, stop)
        try:
            yield
        finally:
            self._bounds.bound = previous

    def bound(self) -> Optional[Tuple[Callable[[], Optional[float]], Optional[threading.Event]]]:
        """This thread's bound (see `bounded`), to hand on to worker threads."""
        return getattr(self._bounds, "bound", None)

    def request(self, method: str, api_path: str, params: Optional[Dict[str, str]] = None,
                body: Any = None, content_type: str = JSON) -> Answer:
        """One request; `Answer` for any HTTP status, `KubeError` when none came (in time)."""
        total = self.connect_timeout + self.read_timeout
        stop: Optional[threading.Event] = None
        bound = self.bound()
        if bound is not None:
            left, stop = bound[0](), bound[1]
            if stop is not None and stop.is_set():
                raise KubeError(f"{method} {api_path}: not sent, stopping")
            if left is not None:
                if left <= 0:
                    raise KubeError(f"{method} {api_path}: not sent, the deadline has passed")
                total = min(total, left)
        with Watch(total, stop, name="kube-watch") as watch, self._watching(watch):
            try:
                answer = self._request(method, api_path, params, body, content_type)
            except KubeError:
                if watch.fired is None:
                    raise
        fired = watch.fired
        if fired is None:  # a cut answer may read as a complete one: only an unfired watch counts
            return answer
        if fired == "stopped":
            raise KubeError(f"{method} {api_path}: abandoned, stopping")
        raise KubeError(f"{method} {api_path}: no complete answer from {self.server} within {total:.1f} s")

    def _watching(self, watch: Watch) -> ContextManager[None]:
        """The watch cuts the socket of our own transport; another transport has no socket of ours."""
        if isinstance(self._adapter, WatchedAdapter):
            return self._adapter.watching(watch)
        return nullcontext()

    def _request(self, method: str, api_path: str, params: Optional[Dict[str, str]], body: Any,
                 content_type: str) -> Answer:
        headers = {}
        token = self.access.token()
        if token:
            headers["Authorization"] = f"Bearer {token}"
        data = None
        if body is not None:
            data = json.dumps(body).encode("utf-8")
            headers["Content-Type"] = content_type
        try:
            with self._session.request(method, self.access.server + api_path, params=params, data=data,
                                       headers=headers, timeout=(self.connect_timeout, self.read_timeout),
                                       allow_redirects=False, verify=self.access.verify, cert=self.access.cert,
                                       proxies=self._proxies, stream=True) as response:
                status = response.status_code
                location = response.headers.get("Location")
                content = b"" if 300 <= status < 400 else _read_capped(response)
        except requests.Timeout:
            raise KubeError(f"{method} {api_path}: no answer from {self.server} in time") from None
        except requests.exceptions.SSLError as exc:
            raise KubeError(f"{method} {api_path}: TLS with {self.server} failed: {_reason(exc)}") from None
        except requests.RequestException as exc:
            raise KubeError(f"{method} {api_path}: cannot reach {self.server}: {_reason(exc)}") from None
        if 300 <= status < 400:
            raise KubeRedirect(f"{method} {api_path}: {self.server} answered a {status} redirect to "
                               f"{location_origin(location, self.server)}; redirects are never followed")
        try:
            parsed = json.loads(content) if content else None
        except ValueError:
            parsed = None
        return Answer(status, parsed)

    def close(self) -> None:
        self._session.close()
        self.access.close()


def location_origin(location: Optional[str], server: str) -> str:
    """Where a redirect points, as an origin (scheme://host:port: no path, query or user info, which
    may carry anything) for the one line that names it; a relative Location is the server's own."""
    if not location:
        return "nowhere (no Location)"
    try:
        parts = urlsplit(location.strip())
        host, port = parts.hostname, parts.port
    except ValueError:
        return "an unreadable Location"
    if not parts.scheme and not parts.netloc:
        return f"{server} itself (a relative Location)"
    if not host:
        return "an unreadable Location"
    host = f"[{host}]" if ":" in host else host
    return f"{parts.scheme or urlsplit(server).scheme}://{host}" + (f":{port}" if port is not None else "")


def _proxies_for(server: str) -> Dict[str, Any]:
    """The environment's proxy for `server`, as kubectl would use one; none (explicitly, so requests
    adds none either) for a loopback host or a plain-http server: requests' own lookup proxies
    127.0.0.1 unless NO_PROXY names it, and through an http proxy the token would travel in clear."""
    none: Dict[str, Any] = {"http": None, "https": None}
    if urlsplit(server).scheme.lower() != "https" or is_loopback_url(server):
        return none
    return dict(requests.utils.get_environ_proxies(server)) or none


def _read_capped(response: requests.Response) -> bytes:
    chunks, size = [], 0
    for chunk in response.iter_content(chunk_size=65536):
        chunks.append(chunk)
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            raise KubeError(f"answer larger than {MAX_BODY_BYTES} bytes")
    return b"".join(chunks)


def _reason(exc: BaseException) -> str:
    text = " ".join(str(exc).split())
    return text[:200] or exc.__class__.__name__
