"""A client that hangs up before its answer (an agent's read timeout during `--first-call-delay`)
must not print a traceback on the foreground emulator's console; a real handler bug still must."""

from __future__ import annotations

import pytest

from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.server import EmulatorServer


@pytest.fixture()
def httpd():
    server = EmulatorServer(ImdsEmulator(PlacementGroup(), vm_name="myvmss_0"))
    yield server._httpd  # the socketserver whose handle_error runs when a handler raises
    server.stop()


@pytest.mark.parametrize("gone", [BrokenPipeError(32, "Broken pipe"), ConnectionResetError(104, "reset by peer")])
def test_a_client_hanging_up_is_quiet(httpd, capsys, gone) -> None:
    try:
        raise gone
    except ConnectionError:
        httpd.handle_error(None, ("127.0.0.1", 40000))
    assert capsys.readouterr().err == ""


def test_other_handler_errors_still_show(httpd, capsys) -> None:
    try:
        raise RuntimeError("a bug in the handler")
    except RuntimeError:
        httpd.handle_error(None, ("127.0.0.1", 40000))
    err = capsys.readouterr().err
    assert "Traceback" in err and "a bug in the handler" in err
