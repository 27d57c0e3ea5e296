"""`vmss-terminate emulator imds`: the foreground command (as a real process) and its Python API."""

from __future__ import annotations

import json
import os
import queue
import re
import socket
import subprocess
import sys
import threading
from pathlib import Path
from typing import List

import pytest
from helpers import interrupt, invoke_cli

from vmss_terminate.cli import main
from vmss_terminate.errors import UsageError
from vmss_terminate_sim.commands.emulator_imds import SCHEDULED_EVENTS_QUERY
from vmss_terminate_sim.emulator.imds.launch import load_scenario, parse_event_spec, start_imds

pytestmark = pytest.mark.timeout(60)


class Lines:
    """Read a process's stdout on a thread so every wait is bounded."""

    def __init__(self, stream) -> None:
        self.queue: "queue.Queue[str]" = queue.Queue()
        self.seen: List[str] = []
        threading.Thread(target=self._pump, args=(stream,), daemon=True).start()

    def _pump(self, stream) -> None:
        for line in stream:
            self.queue.put(line.rstrip("\n"))
        self.queue.put("<EOF>")

    def until(self, pattern: str, timeout: float = 20.0) -> re.Match:
        regex = re.compile(pattern)
        while True:
            line = self.queue.get(timeout=timeout)
            self.seen.append(line)
            match = regex.search(line)
            if match:
                return match
            assert line != "<EOF>", f"process ended before {pattern!r}: {self.seen}"


class At:
    """What the `imds` client fixture wants: an object with `.url`."""

    def __init__(self, url: str) -> None:
        self.url = url


def _start(*args: str) -> "subprocess.Popen[str]":
    return subprocess.Popen([sys.executable, "-u", "-m", "vmss_terminate", "emulator", "imds", "--port", "0", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))


def test_command_serves_prints_urls_and_stops_on_ctrl_c(imds, tmp_path: Path) -> None:
    scenario = tmp_path / "scenario.json"
    scenario.write_text(json.dumps({"Events": [{"EventType": "Freeze", "Resources": ["myvmss_0", "myvmss_1"]}]}))
    proc = _start("--vm-name", "myvmss_0", "--vm-name", "myvmss_1", "--event", "Terminate:myvmss_1",
                  "--scenario", str(scenario), "--rate-limit", "0")
    try:
        out = Lines(proc.stdout)
        url0 = out.until(r"IMDS for myvmss_0 .*: (http://127\.0\.0\.1:\d+)").group(1)
        assert out.until(r"export VMSS_TERMINATE_IMDS_URL=(\S+)").group(1) == url0
        url1 = out.until(r"IMDS for myvmss_1 .*: (http://127\.0\.0\.1:\d+)").group(1)
        # The guidance is copy-pasteable: a GET with the Metadata header and an admin POST, on real URLs.
        assert out.until(r"curl -H Metadata:true '(\S+)'").group(1) == url0 + SCHEDULED_EVENTS_QUERY
        add = out.until(r"curl -X POST -d '(\S+)' (\S+)")
        assert json.loads(add.group(1)) == {"EventType": "Terminate", "Resources": ["myvmss_0"]}
        assert add.group(2) == url0 + "/emulator/events"
        out.until(r"Ctrl-C")
        # Seeded events are printed after the banner, not above the URLs.
        seeded = [out.until(r"^added\s+(\w+) ").group(1) for _ in range(2)]
        assert sorted(seeded) == ["Freeze", "Terminate"]

        vm0, vm1 = At(url0), At(url1)
        events = imds.events(vm1)["Events"]
        assert sorted(e["EventType"] for e in events) == ["Freeze", "Terminate"]
        terminate = next(e["EventId"] for e in events if e["EventType"] == "Terminate")
        assert imds.get(vm0, "/metadata/instance/compute/name",
                        {"api-version": "2021-02-01", "format": "text"}).text == "myvmss_0"

        added = imds.admin("POST", vm0, "/events", json={"EventType": "Reboot", "Resources": ["myvmss_0"]})
        assert added.status_code == 201
        assert len(imds.events(vm1)["Events"]) == 3  # one group behind both servers
        assert imds.approve(vm1, terminate).status_code == 200
        line = out.until(r"approved\s+Terminate " + terminate + r" .* by myvmss_1").string
        assert "NOT in the event's Resources" not in line
        assert imds.approve(vm0, terminate).status_code == 200  # a neighbour's approval is flagged live
        out.until(r"approved\s+Terminate " + terminate + r" .* by myvmss_0  <-- NOT in the event's Resources")
        assert imds.approve(vm0, "00000000-0000-0000-0000-000000000000").status_code == 400
        out.until(r"refused\s+approval of unknown EventId 00000000-0000-0000-0000-000000000000 by myvmss_0")
    finally:
        code = interrupt(proc)
    assert code == 0, proc.stderr.read()
    out.until(r"stopped; 3 approval\(s\):$")
    assert [out.until(r"^  (.*)$").group(1) for _ in range(3)] == [
        f"{terminate} by myvmss_1",
        f"{terminate} by myvmss_0 (NOT in the event's Resources)",
        "00000000-0000-0000-0000-000000000000 by myvmss_0 (unknown EventId, refused)",
    ]


def test_json_output_is_one_document_of_the_endpoints_and_exports(imds) -> None:
    """`-o json`: stdout holds one JSON document (the banner's URLs and exports); the live change
    lines and the closing summary go to stderr so a pipe reads clean JSON."""
    proc = _start("--vm-name", "myvmss_0", "--vm-name", "myvmss_1", "--rate-limit", "0", "-o", "json",
                  "--event", "Terminate:myvmss_1")
    try:
        out = Lines(proc.stdout)
        text = [out.until(r"^\{$").string]
        while text[-1] != "}":
            text.append(out.until(r".*").string)
        document = json.loads("\n".join(text))
        assert [(s["vmName"], s["vmssName"]) for s in document["servers"]] == [("myvmss_0", "myvmss"),
                                                                              ("myvmss_1", "myvmss")]
        for server in document["servers"]:
            assert server["env"] == {"VMSS_TERMINATE_IMDS_URL": server["url"]}
            assert server["scheduledEvents"] == server["url"] + SCHEDULED_EVENTS_QUERY
        events = imds.events(At(document["servers"][1]["url"]))["Events"]
        assert [e["EventType"] for e in events] == ["Terminate"]
    finally:
        code = interrupt(proc)
    assert code == 0, proc.stderr.read()
    assert out.until(r".*").string == "<EOF>"  # nothing after the document (the "added" line went to stderr)
    assert "stopped; 0 approval(s)" in proc.stderr.read()


def test_without_vm_name_it_serves_myvmss_0(imds) -> None:
    proc = _start("--rate-limit", "0")
    try:
        out = Lines(proc.stdout)
        url = out.until(r"IMDS for myvmss_0 \(scale set myvmss\): (\S+)").group(1)
        out.until(r"Ctrl-C")
        assert imds.get(At(url), "/metadata/instance/compute/name",
                        {"api-version": "2021-02-01", "format": "text"}).text == "myvmss_0"
    finally:
        code = interrupt(proc)
    assert code == 0, proc.stderr.read()
    out.until(r"stopped; 0 approval\(s\)$")


def test_fault_flag_breaks_each_vm_endpoint_as_asked(imds) -> None:
    """`--fault` (the admin route's fields): here IMDS's 410 Gone twice on every VM, then normal answers."""
    proc = _start("--vm-name", "myvmss_0", "--vm-name", "myvmss_1", "--rate-limit", "0",
                  "--fault", "status=410,times=2,path=/metadata/scheduledevents")
    try:
        out = Lines(proc.stdout)
        urls = [out.until(rf"IMDS for {vm} .*: (http://127\.0\.0\.1:\d+)").group(1) for vm in ("myvmss_0", "myvmss_1")]
        out.until(r"Ctrl-C")
        for url in urls:  # every VM's endpoint has its own two uses
            codes = [imds.get(At(url), "/metadata/scheduledevents", {"api-version": "2019-01-01"}).status_code
                     for _ in range(3)]
            assert codes == [410, 410, 200]
    finally:
        code = interrupt(proc)
    assert code == 0, proc.stderr.read()


@pytest.mark.parametrize("args, message", [
    (["--vm-name", "a", "--event", "Explode:a"], "invalid --event"),
    (["--vm-name", "a", "--event", "Terminate"], "invalid --event"),
    (["--vm-name", "a", "--event", "Terminate:a@soon"], "@SECONDS"),
    (["--vm-name", "a", "--event", "Terminate:a@1e30"], "@SECONDS"),
    (["--vm-name", "a", "--vm-name", "a"], "must be different"),
    (["--vm-name", " "], "must not be empty"),
    (["--vm-name", "a", "--vm-name", "b", "--port", "65535"], "no room"),
    (["--vm-name", "a", "--scenario", "/nonexistent/scenario.json"], "cannot read scenario"),
    (["--vm-name", "a", "--rate-limit", "-1"], "rate-limit"),
])
def test_bad_input_is_one_line_and_exit_2(args, message) -> None:
    result = invoke_cli(main, ["emulator", "imds", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output and "Traceback" not in result.output


def test_bad_scenario_content(tmp_path: Path) -> None:
    path = tmp_path / "s.json"
    for content, message in [("{", "not valid JSON"), ('{"Events": 3}', "expected a list"),
                             ('[{"EventType": "Terminate"}]', "needs Resources"),
                             ('[{"EventType": "Terminate", "Resources": ["a"], "NotBeforeIn": 1e30}]', "NotBeforeIn")]:
        path.write_text(content)
        with pytest.raises(UsageError, match=message):
            load_scenario(str(path))


def test_parse_event_spec() -> None:
    assert parse_event_spec("terminate:myvmss_1, myvmss_2") == {
        "event_type": "Terminate", "resources": ["myvmss_1", "myvmss_2"]}
    assert parse_event_spec("Freeze:a@90")["not_before_in"] == 90.0


def test_start_imds_python_api(imds) -> None:
    seen: List[str] = []
    with start_imds(["myvmss_0", "myvmss_1"], rate_limit=None, started_ttl=5,
                    events=[{"event_type": "Terminate", "resources": ["myvmss_0"], "not_before_in": 60}],
                    listener=lambda kind, event: seen.append(kind)) as running:
        group, servers = running.group, running.servers
        assert seen == ["added"] and len(servers) == 2
        assert servers[0].port != servers[1].port
        assert running.urls == [servers[0].url, servers[1].url] and running.url_of("myvmss_1") == servers[1].url
        [event] = group.events()
        assert 59 <= event.not_before - group.clock.now() <= 60
        assert imds.events(servers[1])["Events"][0]["EventId"] == event.event_id
    for server in servers:  # the context manager stopped every server
        with pytest.raises(OSError):
            socket.create_connection((server.address, server.port), timeout=5).close()


def test_start_imds_reports_a_busy_port() -> None:
    with start_imds(["a"]) as running:
        with pytest.raises(UsageError, match="cannot listen"):
            start_imds(["b"], port=running.servers[0].port)
