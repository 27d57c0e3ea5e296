"""A port that cannot be listened on is the operator's input: exit 2 and one line naming host and port, the
same for every emulator and the sandbox (issue 28 item 10; the sandbox exited 1 without the port)."""
from __future__ import annotations

import random
import socket
from typing import Iterator, List

import pytest
from helpers import invoke_cli

from vmss_terminate.cli import main


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


@pytest.fixture
def busy_port() -> Iterator[int]:
    """A port held by a listener, with the few above it free: the sandbox's --port-base takes base + 1
    (its token endpoint) before base. Picked below the ephemeral range (32768-60999 on Linux, 49152+
    elsewhere), where no port-0 listener or outgoing connection of the suite's other workers lands: a
    port-0 busy port's neighbour was sometimes another worker's socket, and the sandbox then rightly
    named that one."""
    for port in random.sample(range(20000, 32000 - 8), 200):
        if not all(_free(p) for p in range(port + 1, port + 6)):
            continue
        with socket.socket() as listener:
            try:
                listener.bind(("127.0.0.1", port))
            except OSError:
                continue
            listener.listen()
            yield port
            return
    pytest.fail("no free port with free neighbours in 20000..32000")


@pytest.mark.parametrize("command", [["emulator", "arm", "--port"], ["emulator", "kube", "--port"],
                                     ["emulator", "imds", "--port"], ["sandbox", "--port-base"]])
def test_a_busy_port_is_exit_2_naming_the_port(busy_port: int, command: List[str]) -> None:
    if command[0] == "sandbox" and busy_port > 65535 - 3 - 2:
        pytest.skip("the sandbox needs room for its instances' ports above the base")
    result = invoke_cli(main, [*command, str(busy_port)])
    assert result.exit_code == 2, result.output
    assert f"cannot listen on 127.0.0.1:{busy_port}" in result.output, result.output
    assert "Traceback" not in result.output
