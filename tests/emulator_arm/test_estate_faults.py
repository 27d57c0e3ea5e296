"""The ARM emulator reproduces what estate-scale clients must survive: `--latency`, a bounded
`--generate`, answer faults (foreign links, link loops, stuck operations, short / duplicate /
looping Resource Graph pages), Compute's remaining-resource headers and the VM list's `$filter`.
Plain HTTP with a real token, so each behaviour is checked on the wire."""

from __future__ import annotations

import json
import time
from typing import Any, Dict, List

import pytest
import requests
from helpers import invoke_cli, serving_arm

from vmss_terminate.cli import main
from vmss_terminate.clock import ManualClock
from vmss_terminate.fleet.scope import Scope
from vmss_terminate_sim.emulator.arm import fleetgen
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState, start_arm
from vmss_terminate_sim.emulator.faults import FaultSpecError, parse_fault_spec

from .conftest import API, SUB, vmss_url

GRAPH = "/providers/Microsoft.ResourceGraph/resources"
OTHER = "00000000-0000-0000-0000-0000000000bb"


@pytest.fixture
def state(clock: ManualClock) -> ArmState:
    state = ArmState(clock=clock, page_size=2)
    state.add_scale_set(SUB, "rg", "myvmss", capacity=5, stale_instances=3)
    state.add_scale_set(OTHER, "rg", "other", capacity=1)
    return state


def _fault(arm: ArmServers, spec: str) -> None:
    arm.arm_server.faults.add(parse_fault_spec(spec))


def _graph(http: requests.Session, arm: ArmServers, token: Any = None) -> Dict[str, Any]:
    options: Dict[str, Any] = {"$top": 1}
    if token:
        options["$skipToken"] = token
    answer = http.post(arm.arm_url + GRAPH, params={"api-version": "2021-03-01"}, timeout=5,
                       json={"query": Scope().query(), "options": options})
    assert answer.status_code == 200, answer.text
    return dict(answer.json())


# ---------------------------------------------------------------- links


def test_foreign_link_moves_next_links_and_operation_urls_to_another_origin(
        http: requests.Session, arm: ArmServers) -> None:
    elsewhere = "http://127.0.0.2:9"
    _fault(arm, f"foreign-link={elsewhere},times=all")
    page = http.get(vmss_url(arm) + "/virtualMachines", params={"api-version": API}, timeout=5).json()
    assert page["nextLink"].startswith(elsewhere + "/subscriptions/")
    assert "skiptoken=2" in page["nextLink"]
    upgrade = http.post(vmss_url(arm) + "/manualupgrade", params={"api-version": API}, json={"instanceIds": ["0"]},
                        timeout=5)
    assert upgrade.headers["Azure-AsyncOperation"].startswith(elsewhere + "/subscriptions/")
    assert upgrade.headers["Location"].startswith(elsewhere + "/subscriptions/")
    patch = http.patch(vmss_url(arm), params={"api-version": API}, json={"tags": {"a": "b"}}, timeout=5)
    assert patch.headers["Azure-AsyncOperation"].startswith(elsewhere)
    subscriptions = http.get(arm.arm_url + "/subscriptions", params={"api-version": "2022-12-01"}, timeout=5).json()
    assert subscriptions.get("nextLink") is None or subscriptions["nextLink"].startswith(elsewhere)


def test_link_loop_points_the_next_link_at_the_request_itself(http: requests.Session, arm: ArmServers) -> None:
    _fault(arm, "link-loop,path=/virtualMachines")
    url = vmss_url(arm) + "/virtualMachines"
    page = http.get(url, params={"api-version": API, "$skiptoken": "2"}, timeout=5).json()
    assert page["nextLink"] == f"{url}?api-version={API}&%24skiptoken=2"
    assert [vm["instanceId"] for vm in page["value"]] == ["2", "3"]


def test_stuck_operation_stays_in_progress_while_the_fault_lasts(http: requests.Session, arm: ArmServers) -> None:
    upgrade = http.post(vmss_url(arm) + "/manualupgrade", params={"api-version": API},
                        json={"instanceIds": ["2"]}, timeout=5)
    _fault(arm, "stuck,path=/operations/,times=all")
    for _ in range(5):
        assert http.get(upgrade.headers["Azure-AsyncOperation"], timeout=5).json()["status"] == "InProgress"
    assert http.get(upgrade.headers["Location"], timeout=5).status_code == 202
    arm.arm_server.faults.clear()
    statuses = [http.get(upgrade.headers["Azure-AsyncOperation"], timeout=5).json()["status"] for _ in range(3)]
    assert statuses[-1] == "Succeeded"  # it was never advanced while stuck: the usual countdown follows


# ---------------------------------------------------------------- Resource Graph pages


def test_short_rows_drop_the_skip_token_but_keep_total_records(http: requests.Session, arm: ArmServers) -> None:
    _fault(arm, "short-rows=0,path=ResourceGraph")
    page = _graph(http, arm)
    assert page["data"] == [] and page["count"] == 0
    assert page["totalRecords"] == 2 and "$skipToken" not in page and page["resultTruncated"] == "false"


def test_duplicate_rows_repeat_rows_with_upper_case_ids(http: requests.Session, arm: ArmServers) -> None:
    _fault(arm, "duplicate-rows=1,path=ResourceGraph")
    page = _graph(http, arm)
    assert [row["id"] for row in page["data"]] == [page["data"][0]["id"], page["data"][0]["id"].upper()]
    assert page["count"] == 2 and page["totalRecords"] == 3  # the repeat counted in totalRecords, as Azure does


def test_repeat_skiptoken_answers_the_token_it_was_sent(http: requests.Session, arm: ArmServers) -> None:
    _fault(arm, "repeat-skiptoken,path=ResourceGraph,times=all")
    first = _graph(http, arm)
    token = first["$skipToken"]
    assert _graph(http, arm, token)["$skipToken"] == token
    assert _graph(http, arm, token)["$skipToken"] == token


def test_answer_fault_fields_are_checked() -> None:
    with pytest.raises(FaultSpecError, match="foreign-link"):
        parse_fault_spec("foreign-link=not-a-url")
    with pytest.raises(FaultSpecError, match="short-rows"):
        parse_fault_spec("short-rows=x")
    assert parse_fault_spec("stuck").stuck


# ---------------------------------------------------------------- throttling headers


def _upgrade(http: requests.Session, arm: ArmServers, name: str = "myvmss", sub: str = SUB) -> requests.Response:
    return http.post(vmss_url(arm, name=name, sub=sub) + "/manualupgrade", params={"api-version": API},
                     json={"instanceIds": ["*"]}, timeout=5)


def test_compute_policies_send_one_remaining_resource_header_each_and_throttle(
        http: requests.Session, arm: ArmServers, state: ArmState, clock: ManualClock) -> None:
    state.load_seed({"quotas": [
        {"kind": "writes", "bucket": 2, "refillPerSecond": 0.5, "computePolicy": "VMScaleSetBatchedVMRequests"},
        {"kind": "writes", "bucket": 100, "refillPerSecond": 1, "computePolicy": "VmssQueuedVMOperations"}]})
    first = _upgrade(http, arm)
    assert first.raw.headers.getlist("x-ms-ratelimit-remaining-resource") == [
        "Microsoft.Compute/VMScaleSetBatchedVMRequests;1", "Microsoft.Compute/VmssQueuedVMOperations;99"]
    assert "x-ms-ratelimit-remaining-subscription-writes" not in first.headers
    assert _upgrade(http, arm).status_code == 202
    refused = _upgrade(http, arm)
    assert refused.status_code == 429 and refused.headers["Retry-After"] == "2"
    error = refused.json()["error"]
    assert error["code"] == "OperationNotAllowed"
    assert error["details"][0]["code"] == "TooManyRequests"
    assert error["details"][0]["target"] == "VMScaleSetBatchedVMRequests"
    assert "Microsoft.Compute/VMScaleSetBatchedVMRequests;0" in refused.headers["x-ms-ratelimit-remaining-resource"]
    clock.advance(2)
    assert _upgrade(http, arm).status_code == 202


def test_compute_headers_joined_in_one_header(http: requests.Session, arm: ArmServers, state: ArmState) -> None:
    state.load_seed({"computeHeaders": "joined", "quotas": [
        {"kind": "writes", "bucket": 5, "refillPerSecond": 1, "computePolicy": "Update3Min"},
        {"kind": "writes", "bucket": 50, "refillPerSecond": 1, "computePolicy": "Update30Min"}]})
    answer = _upgrade(http, arm)
    assert answer.raw.headers.getlist("x-ms-ratelimit-remaining-resource") == [
        "Microsoft.Compute/Update3Min;4,Microsoft.Compute/Update30Min;49"]


def test_a_quota_for_one_subscription_leaves_the_others_unlimited(
        http: requests.Session, arm: ArmServers, state: ArmState) -> None:
    from vmss_terminate_sim.emulator.arm.quota import parse_spec

    state.quotas.configure([parse_spec(f"writes=1/0.25,subscription={SUB}")])
    assert _upgrade(http, arm).headers["x-ms-ratelimit-remaining-subscription-writes"] == "0"
    assert _upgrade(http, arm).status_code == 429
    others = [_upgrade(http, arm, "other", OTHER) for _ in range(3)]
    assert [a.status_code for a in others] == [202] * 3
    assert "x-ms-ratelimit-remaining-subscription-writes" not in others[0].headers
    with pytest.raises(ValueError, match="subscription=ID"):
        parse_spec("writes=1/1,tenant=x")


# ---------------------------------------------------------------- VM list $filter


def _instance_ids(http: requests.Session, url: str, **params: str) -> "tuple[List[str], List[str]]":
    ids, links = [], []
    answer = http.get(url, params=dict(params, **{"api-version": API}), timeout=5)
    while True:
        assert answer.status_code == 200, answer.text
        page = answer.json()
        ids += [vm["instanceId"] for vm in page["value"]]
        if not page.get("nextLink"):
            return ids, links
        links.append(page["nextLink"])
        answer = http.get(page["nextLink"], timeout=5)


def test_vm_list_filter_latest_model_applied(http: requests.Session, arm: ArmServers) -> None:
    url = vmss_url(arm) + "/virtualMachines"
    stale, links = _instance_ids(http, url, **{"$filter": "properties/latestModelApplied eq false"})
    assert stale == ["2", "3", "4"]
    assert all("latestModelApplied" in link for link in links)  # the filter survives paging
    current, _ = _instance_ids(http, url, **{"$filter": "properties/latestModelApplied  eq  TRUE"})
    assert current == ["0", "1"]
    everything, _ = _instance_ids(http, url)
    assert everything == ["0", "1", "2", "3", "4"]
    refused = http.get(url, params={"api-version": API, "$filter": "name eq 'x'"}, timeout=5)
    assert refused.status_code == 400 and refused.json()["error"]["target"] == "$filter"


# ---------------------------------------------------------------- latency, --generate bound


def test_latency_delays_every_answer_including_the_token_endpoint() -> None:
    with start_arm(ArmState(), latency=0.3) as arm:
        started = time.monotonic()
        requests.get(arm.token_url, timeout=5)
        assert time.monotonic() - started >= 0.3
        started = time.monotonic()
        requests.get(arm.arm_url + "/subscriptions", timeout=5)
        assert time.monotonic() - started >= 0.3


def test_cli_latency_option_reaches_the_servers() -> None:
    with serving_arm("--latency", "250", "--generate", "2/1") as lines:
        connect = json.loads(lines[-1].split(":", 1)[1])
        started = time.monotonic()
        answer = requests.get(connect["IDENTITY_ENDPOINT"], timeout=5)
        assert answer.status_code >= 400  # no identity header: refused, but only after the latency
        assert time.monotonic() - started >= 0.25


@pytest.mark.parametrize("args, message", [
    (["--latency", "-1"], "--latency"),
    (["--generate", f"{fleetgen.MAX_SCALE_SETS + 1}/1x0"], "at most 20,000 scale sets"),
    (["--generate", "10/1001"], "1,000 subscriptions"),
    (["--generate", "1000/1x1000"], "200,000 instances"),
])
def test_cli_refuses_latency_and_generate_out_of_range(args: List[str], message: str) -> None:
    result = invoke_cli(main, ["emulator", "arm", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output
    assert "Traceback" not in result.output


def test_generate_bound_in_a_seed_is_refused() -> None:
    with pytest.raises(ValueError, match="at most"):
        ArmState().load_seed({"generate": {"scaleSets": fleetgen.MAX_SCALE_SETS + 1}})


# ---------------------------------------------------------------- computeresources summary


def _summary(http: requests.Session, arm: ArmServers, query: str) -> requests.Response:
    return http.post(arm.arm_url + GRAPH, params={"api-version": "2021-03-01"}, timeout=5, json={"query": query})


def test_computeresources_summary_counts_stale_instances_per_set(
        http: requests.Session, arm: ArmServers, state: ArmState) -> None:
    answer = _summary(http, arm, Scope().stale_summary_query())
    assert answer.status_code == 200, answer.text
    rows = {row["id"]: row for row in answer.json()["data"]}
    mine = state.scale_set(SUB, "rg", "myvmss")
    assert mine is not None
    assert rows[mine.resource_id.lower()] == {"id": mine.resource_id.lower(), "instances": 5, "reported": 5,
                                              "stale": 3}
    grouped = _summary(http, arm, Scope.build(resource_groups=["nope"]).stale_summary_query())
    assert grouped.json()["data"] == []
    other = _summary(http, arm, "computeresources | where type =~ 'x' | project id")
    assert other.status_code == 400  # only the summary is served, never an invented answer
    state.rg_model_reported = False
    assert {r["reported"] for r in _summary(http, arm, Scope().stale_summary_query()).json()["data"]} == {0}
    state.rg_compute_resources = False
    refused = _summary(http, arm, Scope().stale_summary_query())
    assert refused.status_code == 400 and "computeresources" in refused.text
