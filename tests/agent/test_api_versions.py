"""Newer Scheduled Events versions: each documented one from 2019-01-01 works end to end, EventSource
and DurationInSeconds reach hooks, the webhook and metrics, and `--api-version latest` asks IMDS."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, List

import pytest
from inprocess import InProcessTransport

from vmss_terminate.agent.imds import ImdsClient
from vmss_terminate.pipeline import decisions as D
from vmss_terminate.scheduled_events import SCHEDULED_EVENTS_VERSIONS
from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.server import EmulatorServer, Request, Response

from .conftest import VM, Imds, Recorder, make_agent, run_cli
from .test_hooks import probe, runs

SUPPORTED = [v for v in SCHEDULED_EVENTS_VERSIONS if v >= "2019-01-01"]


@pytest.mark.parametrize("version", SUPPORTED)
def test_every_documented_version_from_2019_01_01_drains_and_approves(imds: Imds, tmp_path: Path,
                                                                        version: str) -> None:
    eid = imds.group.add_event("Terminate", [VM], event_source="User", duration_in_seconds=-1)
    agent = make_agent(imds.url, hooks=[probe(tmp_path / "out")], api_version=version)
    agent.run_once(retry_for=0)
    assert imds.approved_ids() == [eid]
    (record,) = runs(tmp_path / "out")
    env = record["env"]
    assert env["VMSS_TERMINATE_EVENT_SOURCE"] == ("User" if version >= "2019-08-01" else "")
    assert env["VMSS_TERMINATE_DURATION_SECONDS"] == ("-1" if version >= "2020-07-01" else "")
    assert {r.query["api-version"][0] for r in imds.server.log.find(path_contains="scheduledevents")} == {version}


class _Webhook:
    def __init__(self) -> None:
        self.bodies: List[Dict[str, Any]] = []

    def handle(self, request: Request) -> Response:
        self.bodies.append(request.json())
        return Response.json(200, {})


def test_event_source_and_duration_reach_the_json_webhook(imds: Imds) -> None:
    imds.group.add_event("Terminate", [VM], event_source="Platform", duration_in_seconds=-1)
    app = _Webhook()
    with EmulatorServer(app) as hook_server:
        make_agent(imds.url, webhook=hook_server.url, api_version="2020-07-01").run_once(retry_for=0)
    (body,) = app.bodies
    assert (body["event_source"], body["duration_in_seconds"]) == ("Platform", -1)
    assert body["event"]["EventSource"] == "Platform"


def test_latest_asks_imds_and_says_which_version_it_chose(imds: Imds, tmp_path: Path) -> None:
    imds.group.add_event("Terminate", [VM], event_source="User", duration_in_seconds=-1)
    agent = make_agent(imds.url, hooks=[probe(tmp_path / "out")], api_version="latest")
    recorder = Recorder()
    agent.subscribe(recorder)
    agent.run_once(retry_for=0)
    chosen = [d for d in recorder.items if d.kind == D.API_VERSION]
    assert chosen and chosen[0].data["api_version"] == SUPPORTED[-1]
    assert SUPPORTED[-1] in chosen[0].data["offered"]
    asked = imds.server.log.find(path_contains="scheduledevents")
    assert "api-version" not in asked[0].query and asked[0].status == 400  # the question: 400 + newest-versions
    assert runs(tmp_path / "out")[0]["env"]["VMSS_TERMINATE_EVENT_SOURCE"] == "User"


def test_latest_skips_versions_imds_lists_but_scheduled_events_does_not_serve(no_sockets: None) -> None:
    """Real IMDS lists its newest *instance* versions (e.g. 2025-04-07) in `newest-versions`;
    a version that Scheduled Events refuses (400) is skipped for the next."""

    class ListsInstanceVersions(ImdsEmulator):
        def handle(self, request: Request) -> Response:
            if "scheduledevents" in request.path and request.param("api-version") is None:
                return Response.json(400, {"error": "Bad request.", "newest-versions":
                                           ["2025-04-07", "2024-07-17", "2019-08-01"]})
            return super().handle(request)

    transport = InProcessTransport(ListsInstanceVersions(PlacementGroup(), vm_name=VM, rate_limit=None))
    client = ImdsClient("http://127.0.0.1:9", api_version="latest", first_call_timeout=5, transport=transport)
    assert client.resolve_api_version(retry_for=0) == "2019-08-01"
    assert client.discovered == ("2019-08-01", ["2025-04-07", "2024-07-17", "2019-08-01"])
    tried = [r.query.get("api-version", [""])[0] for r in transport.log.find(path_contains="scheduledevents")]
    assert tried == ["", "2025-04-07", "2024-07-17", "2019-08-01"]


def test_cli_accepts_latest_and_refuses_a_version_without_terminate(imds: Imds) -> None:
    eid = imds.group.add_event("Terminate", [VM])
    done = run_cli("run", "--once", "--imds-url", imds.url, "--state-file", ":memory:", "--api-version", "latest",
                   "--log-format", "json")
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines()]
    chosen = [line for line in lines if line.get("kind") == D.API_VERSION]
    assert chosen and chosen[0]["data"]["api_version"] == SUPPORTED[-1]
    assert imds.approved_ids() == [eid]
    old = run_cli("run", "--once", "--imds-url", imds.url, "--api-version", "2018-08-01")
    assert old.returncode == 2 and "no Terminate events" in old.stderr
