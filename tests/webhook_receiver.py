"""An incoming-webhook endpoint on loopback for the chat-notice tests of the agent and of `central
run`: records each JSON body it is POSTed and answers `status`."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Dict, List


class Receiver(ThreadingHTTPServer):
    """Serves from a daemon thread once made; `url` has a Slack-like path whose last part is its token."""

    daemon_threads = True

    def __init__(self, status: int = 200) -> None:
        self.bodies: List[Dict[str, Any]] = []
        self.status = status
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                receiver.bodies.append(json.loads(self.rfile.read(length)))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        super().__init__(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server_address[1]}/services/T000/B000/secret-token"
        threading.Thread(target=self.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True).start()
