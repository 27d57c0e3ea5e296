"""Put Message to an Azure Storage queue with Shared Key, in the standard library -- how the ARM
emulator plays Event Grid delivering to a queue (on Azurite: `vmss_terminate_sim/azurite.py`).

Why not the Storage SDK: the emulators are stdlib-only (they stand in for Azure in front of either
side); the two REST calls needed are small and documented:

* Create Queue: `PUT {QueueEndpoint}/{queue}` -> 201, or 204 when it exists.
* Put Message: `POST {QueueEndpoint}/{queue}/messages` with
  `<QueueMessage><MessageText>...</MessageText></QueueMessage>` -> 201.
* Authorization: `SharedKey {account}:{signature}`, the HMAC-SHA256 (with the base64-decoded account
  key) of the string-to-sign of "Authorize with Shared Key" (Learn): verb, the standard headers,
  canonicalized `x-ms-` headers, and the canonicalized resource `/{account}{path}` plus the query.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import http.client
from email.utils import formatdate
from typing import Dict, List, Tuple
from urllib.parse import quote, urlsplit
from xml.sax.saxutils import escape

VERSION = "2021-12-02"


class StorageQueueError(OSError):
    """The queue service refused a request (status and the start of its answer in the message)."""


def parse_connection_string(text: str) -> Dict[str, str]:
    """`Key=Value;...` -> dict (values may contain `=`, account keys do)."""
    out: Dict[str, str] = {}
    for part in text.split(";"):
        if "=" in part:
            key, _, value = part.partition("=")
            out[key.strip()] = value.strip()
    for needed in ("AccountName", "AccountKey"):
        if needed not in out:
            raise ValueError(f"the connection string has no {needed}")
    if "QueueEndpoint" not in out:
        suffix = out.get("EndpointSuffix", "core.windows.net")
        out["QueueEndpoint"] = f"{out.get('DefaultEndpointsProtocol', 'https')}://{out['AccountName']}.queue.{suffix}"
    return out


class StorageQueueWriter:
    """Writes messages to one queue of one account; thread-safe (a connection per request)."""

    def __init__(self, connection_string: str, queue: str, timeout: float = 10.0) -> None:
        fields = parse_connection_string(connection_string)
        self.account = fields["AccountName"]
        self._key = base64.b64decode(fields["AccountKey"])
        endpoint = urlsplit(fields["QueueEndpoint"].rstrip("/"))
        if endpoint.scheme not in ("http", "https") or not endpoint.hostname:
            raise ValueError(f"QueueEndpoint {fields['QueueEndpoint']!r} is not an http(s) URL")
        self._scheme, self._host, self._port = endpoint.scheme, endpoint.hostname, endpoint.port
        self._base = endpoint.path  # "/devstoreaccount1" on Azurite (path-style), "" on Azure
        self.queue = queue
        self.timeout = timeout

    def create_queue(self) -> None:
        status, body = self._request("PUT", f"{self._base}/{quote(self.queue)}", b"")
        if status not in (201, 204):
            raise StorageQueueError(f"Create Queue {self.queue}: HTTP {status} {body[:200]!r}")

    def put(self, text: str) -> None:
        payload = ("<?xml version=\"1.0\" encoding=\"utf-8\"?><QueueMessage><MessageText>"
                   f"{escape(text)}</MessageText></QueueMessage>").encode()
        status, body = self._request("POST", f"{self._base}/{quote(self.queue)}/messages", payload,
                                     content_type="application/xml")
        if status != 201:
            raise StorageQueueError(f"Put Message to {self.queue}: HTTP {status} {body[:200]!r}")

    def _request(self, verb: str, path: str, body: bytes, content_type: str = "") -> Tuple[int, bytes]:
        headers = {"x-ms-date": formatdate(usegmt=True), "x-ms-version": VERSION}
        if content_type:
            headers["Content-Type"] = content_type
        headers["Content-Length"] = str(len(body))
        headers["Authorization"] = f"SharedKey {self.account}:{self._sign(verb, path, headers)}"
        connection_type = http.client.HTTPSConnection if self._scheme == "https" else http.client.HTTPConnection
        connection = connection_type(self._host, self._port, timeout=self.timeout)
        try:
            connection.request(verb, path, body=body, headers=headers)
            answer = connection.getresponse()
            return answer.status, answer.read()
        finally:
            connection.close()

    def _sign(self, verb: str, path: str, headers: Dict[str, str]) -> str:
        length = headers.get("Content-Length", "")
        standard: List[str] = [verb, "", "", "" if length == "0" else length, "", headers.get("Content-Type", ""),
                               "", "", "", "", "", ""]
        canonical_headers = "".join(f"{k.lower()}:{v}\n" for k, v in sorted(headers.items())
                                    if k.lower().startswith("x-ms-"))
        resource = f"/{self.account}{path}"
        text = "\n".join(standard) + "\n" + canonical_headers + resource
        digest = hmac.new(self._key, text.encode("utf-8"), hashlib.sha256).digest()
        return base64.b64encode(digest).decode("ascii")
