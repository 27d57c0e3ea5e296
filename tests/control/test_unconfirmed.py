"""Failures after ARM accepted a write, and broken connections: said as what they are."""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
from typing import Iterator

import pytest

from vmss_terminate.control import Connection, enable, status
from vmss_terminate.errors import AzureError
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState

from .conftest import RG, SUB


def test_patch_whose_operation_cannot_be_followed_says_applied_could_not_confirm(
        arm: ArmServers, state: ArmState) -> None:
    ss = state.add_scale_set(SUB, RG, "web", capacity=2)
    arm.arm_server.faults.add(status=500, method="GET", path_contains="/operations/", times=None,
                              body=b'{"error": {"code": "InternalServerError", "message": "poll broke"}}')
    conn = Connection(subscription_id=SUB, arm_endpoint=arm.arm_url, retry_total=1, retry_backoff_factor=0.0)
    with pytest.raises(AzureError) as caught:
        enable(RG, "web", 10, connection=conn)
    message = str(caught.value)
    assert "the profile change was applied (the model reads back as changed), but its completion could not be " \
           "confirmed" in message, message
    assert "no instances were upgraded" in message and "vmss-terminate upgrade -g rg -n web" in message
    assert "updating scale set rg/web: InternalServerError" not in message  # not "updating failed"
    assert arm.arm_server.log.count("POST") == 0
    assert ss.instances  # the model change is there: status agrees
    assert status(RG, "web", connection=conn).profile.is_enabled_with(10)


@pytest.fixture
def resetting_server() -> Iterator[str]:
    """A loopback TCP server that reads the request, then resets the connection (RST)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        stop.set()
        with contextlib.suppress(OSError):  # close() alone does not wake a thread blocked in accept()
            listener.shutdown(socket.SHUT_RDWR)
        listener.close()
        thread.join(timeout=5)
        assert not thread.is_alive(), "the resetting server did not stop"


def test_connection_reset_is_reported_as_a_reset_not_as_cannot_connect(arm: ArmServers, resetting_server: str) -> None:
    conn = Connection(subscription_id=SUB, arm_endpoint=resetting_server, retry_total=0)
    with pytest.raises(AzureError) as caught:
        status(RG, "web", connection=conn)
    assert "the connection to ARM was reset while the request was in progress" in str(caught.value)
    assert "cannot reach" not in str(caught.value) and "cannot connect" not in str(caught.value)


def test_refused_connection_says_cannot_connect(arm: ArmServers) -> None:
    spare = socket.socket()
    spare.bind(("127.0.0.1", 0))
    port = spare.getsockname()[1]
    spare.close()  # nothing listens there now
    conn = Connection(subscription_id=SUB, arm_endpoint=f"http://127.0.0.1:{port}", retry_total=0)
    with pytest.raises(AzureError, match="cannot connect to ARM: connection refused"):
        status(RG, "web", connection=conn)
