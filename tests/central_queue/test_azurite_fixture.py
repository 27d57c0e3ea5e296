"""The run's Azurite: the real server, reached with the real SDKs, on loopback only."""

from __future__ import annotations

import uuid
from typing import Any

from vmss_terminate.net import is_loopback_host
from vmss_terminate_sim import azurite


def test_azurite_listens_on_loopback_and_the_real_sdk_talks_to_it(azurite_endpoints: Any) -> None:
    from urllib.parse import urlsplit

    from azure.storage.queue import QueueClient

    for url in (azurite_endpoints.blob, azurite_endpoints.queue):
        assert is_loopback_host(urlsplit(url).hostname or "")
    name = f"t{uuid.uuid4().hex}"
    queue = QueueClient.from_connection_string(azurite_endpoints.connection_string, name)
    queue.create_queue()
    queue.send_message("hello")
    assert [m.content for m in queue.receive_messages()] == ["hello"]


def test_the_command_line_never_lets_azurite_report_telemetry_or_listen_beyond_loopback() -> None:
    line = azurite.command(azurite.executable())
    assert "--disableTelemetry" in line and "--inMemoryPersistence" in line
    for flag in ("--blobHost", "--queueHost", "--tableHost"):
        assert line[line.index(flag) + 1] == "127.0.0.1"
    for flag in ("--blobPort", "--queuePort", "--tablePort"):
        assert line[line.index(flag) + 1] == "0"


def test_without_npm_the_message_names_node_npm_and_the_install_command(monkeypatch: Any, tmp_path: Any) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no npm on it
    monkeypatch.setenv("VMSS_TERMINATE_AZURITE_DIR", str(tmp_path / "cache"))
    message = azurite.missing_azurite_message()
    assert "npm" in message and azurite.install_command() in message
    assert azurite.install_command().endswith("-m vmss_terminate_sim.azurite install")


def test_install_is_a_no_op_once_the_pinned_version_is_cached(azurite_endpoints: Any, monkeypatch: Any,
                                                              tmp_path: Any) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # npm is not even looked at
    assert azurite.install() == azurite.executable()
