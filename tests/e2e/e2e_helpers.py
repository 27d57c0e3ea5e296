"""Helpers for end-to-end tests (import as `from e2e_helpers import ...`): a started sandbox, the real
Azure SDK pointed at it, IMDS reads."""

from __future__ import annotations

import contextlib
from typing import Any, Dict, Iterator, List

import requests

from vmss_terminate.control.pipeline import build_compute_client
from vmss_terminate_sim.sandbox import Sandbox, SandboxConfig

NO_PROXY = {"http": None, "https": None}


@contextlib.contextmanager
def running(**config: Any) -> Iterator[Sandbox]:
    box = Sandbox(SandboxConfig(**config)).start()
    try:
        yield box
    finally:
        box.stop()


@contextlib.contextmanager
def compute_client(box: Sandbox) -> Iterator[Any]:
    """azure-mgmt-compute's client, built by the control plane's own factory, with the sandbox's
    credential (its token endpoint; the process environment is left alone)."""
    connection = box.connection()
    client = build_compute_client(connection.resolve(), connection.credential)
    try:
        yield client
    finally:
        client.close()


def imds_events(url: str) -> Dict[str, Any]:
    response = requests.get(f"{url}/metadata/scheduledevents", params={"api-version": "2019-01-01"},
                            headers={"Metadata": "true"}, proxies=NO_PROXY, timeout=5, allow_redirects=False)
    response.raise_for_status()
    return response.json()


def resources_by_event(document: Dict[str, Any]) -> Dict[str, List[str]]:
    return {e["EventId"]: e["Resources"] for e in document["Events"]}
