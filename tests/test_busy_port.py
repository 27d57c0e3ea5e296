"""A port that cannot be listened on is the operator's input: exit 2 and one line naming host and port, the
same for every emulator and the sandbox (issue 28 item 10; the sandbox exited 1 without the port)."""
from __future__ import annotations

import socket
from typing import Iterator, List

import pytest
from helpers import invoke_cli

from vmss_terminate.cli import main


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        yield listener.getsockname()[1]


@pytest.mark.parametrize("command", [["emulator", "arm", "--port"], ["emulator", "kube", "--port"],
                                     ["emulator", "imds", "--port"], ["sandbox", "--port-base"]])
def test_a_busy_port_is_exit_2_naming_the_port(busy_port: int, command: List[str]) -> None:
    if command[0] == "sandbox" and busy_port > 65535 - 3 - 2:
        pytest.skip("the sandbox needs room for its instances' ports above the base")
    result = invoke_cli(main, [*command, str(busy_port)])
    assert result.exit_code == 2, result.output
    assert f"cannot listen on 127.0.0.1:{busy_port}" in result.output, result.output
    assert "Traceback" not in result.output
