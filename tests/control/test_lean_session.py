"""control/lean_session.py: its short path puts the same request on the wire as requests.Session
(trust_env off, as the transports use it), and keeps requests' cookie and redirect behaviour."""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator, List, Tuple

import pytest
import requests

from vmss_terminate.control.lean_session import LeanSession

Seen = Tuple[str, List[Tuple[str, str]], bytes]


class _Recorder(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    seen: List[Seen]

    def _answer(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        self.server.seen.append((self.requestline, list(self.headers.items()), body))  # type: ignore[attr-defined]
        if self.path.startswith("/cookie"):
            self.send_response(200)
            self.send_header("Set-Cookie", "affinity=abc; Path=/")
        elif self.path.startswith("/moved"):
            self.send_response(302)
            self.send_header("Location", "/elsewhere")
        else:
            self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"{}")

    do_GET = do_PATCH = do_POST = do_PUT = do_DELETE = _answer

    def log_message(self, *args: Any) -> None:
        pass


@pytest.fixture(scope="module")
def recorder() -> Iterator[ThreadingHTTPServer]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.01}, daemon=True)
    thread.start()
    try:
        yield httpd
    finally:
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture()
def server(recorder: ThreadingHTTPServer) -> ThreadingHTTPServer:
    recorder.seen = []  # type: ignore[attr-defined]
    return recorder


def _sessions() -> Tuple[requests.Session, requests.Session]:
    plain, lean = requests.Session(), LeanSession()
    plain.trust_env = lean.trust_env = False
    return plain, lean


CALLS = [
    ("GET", "/a/b?api-version=2024-11-01&$filter=properties/latestModelApplied eq false",
     {"Authorization": "Bearer t", "Accept": "application/json", "x-dropped": None}, None),
    ("PATCH", "/set?api-version=1", {"Content-Type": "application/json", "If-Match": '"e1"'}, b'{"a": 1}'),
    ("POST", "/set/manualupgrade", {"User-Agent": "ours"}, None),
    ("PUT", "/text", {}, "caf\u00e9"),
]


@pytest.mark.parametrize("method,path,headers,data", CALLS)
def test_the_short_path_sends_what_requests_sends(server: ThreadingHTTPServer, method: str, path: str,
                                                   headers: Any, data: Any) -> None:
    url = f"http://127.0.0.1:{server.server_address[1]}{path}"
    for session in _sessions():
        answer = session.request(method, url, headers=dict(headers), data=data, allow_redirects=False,
                                 stream=True, timeout=(5, 5))
        assert answer.status_code == 200 and answer.content == b"{}"
        session.close()
    seen = server.seen  # type: ignore[attr-defined]
    assert len(seen) == 2
    assert seen[0] == seen[1]  # request line, every header in order, body
    assert ("x-dropped" not in dict(seen[1][1])) and seen[1][0].startswith(method)


def test_a_cookie_answer_is_kept_and_sent_back_as_requests_does(server: ThreadingHTTPServer) -> None:
    base = f"http://127.0.0.1:{server.server_address[1]}"
    for session in _sessions():
        session.get(base + "/cookie", allow_redirects=False)
        assert session.cookies.get("affinity") == "abc"
        session.get(base + "/after", allow_redirects=False)
    seen = server.seen  # type: ignore[attr-defined]
    assert seen[1] == seen[3] and dict(seen[3][1]).get("Cookie") == "affinity=abc"


def test_a_redirect_is_not_followed_unless_asked_and_next_is_kept(server: ThreadingHTTPServer) -> None:
    base = f"http://127.0.0.1:{server.server_address[1]}"
    plain, lean = _sessions()
    kept = [s.get(base + "/moved", allow_redirects=False) for s in (plain, lean)]
    assert [a.status_code for a in kept] == [302, 302]
    assert kept[0].next is not None and kept[1].next is not None and kept[0].next.url == kept[1].next.url
    followed = [s.get(base + "/moved") for s in (plain, lean)]  # asked: followed (requests' own path)
    assert [a.status_code for a in followed] == [200, 200] and followed[1].url.endswith("/elsewhere")
    seen = server.seen  # type: ignore[attr-defined]
    assert seen[0] == seen[1] and seen[2:4] == seen[4:6]


def test_anything_to_merge_goes_through_requests(server: ThreadingHTTPServer) -> None:
    base = f"http://127.0.0.1:{server.server_address[1]}"
    for session in _sessions():
        session.get(base + "/p", params={"a": "b c"}, auth=("u", "p"), allow_redirects=False)
    seen = server.seen  # type: ignore[attr-defined]
    assert seen[0] == seen[1] and seen[1][0].startswith("GET /p?a=b+c ")
    assert dict(seen[1][1])["Authorization"].startswith("Basic ")
