"""Resource Graph, many subscriptions, generated estates and per-subscription quotas in the ARM
emulator, driven by the real azure-mgmt-resourcegraph client and plain HTTP."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator, List

import pytest
import requests

from vmss_terminate.clock import ManualClock
from vmss_terminate.control.pipeline import allow_loopback_http_policy
from vmss_terminate.fleet.scope import PROJECTION, Scope
from vmss_terminate_sim.emulator.arm import fleetgen
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState
from vmss_terminate_sim.emulator.arm.resourcegraph import QueryError, parse_query

from .conftest import vmss_url

pytest.importorskip("azure.mgmt.resourcegraph")

ROOT = Path(__file__).resolve().parents[2]
SUB0 = "00000000-0000-0000-0000-0000000000aa"
RG_PATH = "/providers/Microsoft.ResourceGraph/resources"
GRAPH_API = {"api-version": "2021-03-01"}


@pytest.fixture
def state(clock: ManualClock) -> ArmState:
    state = ArmState(clock=clock)
    state.load_seed({"generate": {"scaleSets": 30, "subscriptions": 3, "capacity": 2},
                     "managementGroups": {"mg-prod": [fleetgen.subscription_id(0), fleetgen.subscription_id(2)]}})
    return state


@pytest.fixture
def graph(arm: ArmServers, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    from azure.identity import DefaultAzureCredential
    from azure.mgmt.resourcegraph import ResourceGraphClient

    for name, value in arm.env.items():
        monkeypatch.setenv(name, value)
    with ResourceGraphClient(DefaultAzureCredential(), base_url=arm.arm_url,
                             per_call_policies=[allow_loopback_http_policy()]) as client:
        yield client


def _query(graph: Any, query: str, **kw: Any) -> Any:
    from azure.mgmt.resourcegraph.models import QueryRequest, QueryRequestOptions

    options = QueryRequestOptions(top=kw.pop("top", 1000), skip_token=kw.pop("skip_token", None))
    return graph.resources(QueryRequest(query=query, options=options, **kw))


def _all_rows(graph: Any, query: str, **kw: Any) -> "tuple[List[dict], int]":
    rows, pages, token = [], 0, None
    while True:
        page = _query(graph, query, skip_token=token, **kw)
        rows.extend(page.data)
        pages += 1
        token = page.skip_token
        if not token:
            return rows, pages


def test_the_product_query_returns_every_scale_set_as_arm_rows(graph: Any, state: ArmState) -> None:
    rows, pages = _all_rows(graph, Scope().query())
    assert pages == 1 and len(rows) == 30
    row = rows[0]
    assert list(row) == [name for name, _ in PROJECTION]  # only the columns the audit reads
    assert row["resourceGroup"] == row["resourceGroup"].lower()
    assert row["orchestrationMode"] == "Uniform" and row["upgradeMode"] == "Manual"
    assert isinstance(row["capacity"], int)
    assert any(r["maxBatchInstancePercent"] is None for r in rows)  # a path not there projects null
    assert [r["id"].lower() for r in rows] == sorted(r["id"].lower() for r in rows)
    # each column is its path in the whole ARM row (the grammar's other project form)
    whole = _all_rows(graph, "resources | where type =~ 'microsoft.compute/virtualmachinescalesets' "
                             "| project id, name, type, subscriptionId, resourceGroup, location, tags, sku, properties")[0]
    assert set(whole[0]) == {"id", "name", "type", "subscriptionId", "resourceGroup", "location", "tags", "sku",
                             "properties"}
    for projected, full in zip(rows, whole):
        for name, path in PROJECTION:
            value: Any = full
            for key in path.split("."):
                value = value.get(key) if isinstance(value, dict) else None
            assert projected[name] == value, (name, path)


def test_skip_token_pages_until_complete(graph: Any, state: ArmState) -> None:
    state.rg_page_size = 7
    rows, pages = _all_rows(graph, Scope().query())
    assert pages == 5  # 7 + 7 + 7 + 7 + 2
    assert len({r["id"] for r in rows}) == 30


def test_pages_after_the_first_follow_changes_to_the_estate(graph: Any, state: ArmState) -> None:
    """The pages after the first are cut from a cached result only while the estate is unchanged;
    a change between pages (here a set whose id sorts first) is seen by the next page, which is
    cut from the current estate at the token's offset: the last row of page 1 comes again, as a
    paged Resource Graph read may repeat or skip rows while resources change."""
    state.rg_page_size = 7
    query = Scope().query()
    first = _query(graph, query)
    second = _query(graph, query, skip_token=first.skip_token)  # served from the first page's result
    assert [r["id"] for r in second.data] == [r["id"] for r in _all_rows(graph, query)[0][7:14]]
    sub = fleetgen.subscription_id(0)
    state.add_scale_set(sub, "rg-fleet-0", "aaa-first", capacity=1)
    again = _query(graph, query, skip_token=first.skip_token)
    assert again.total_records == 31
    assert again.data[0]["id"] == first.data[-1]["id"]  # shifted by the new set
    rows, _ = _all_rows(graph, query)
    assert any(r["name"] == "aaa-first" for r in rows)


def test_cached_results_are_bounded(graph: Any, state: ArmState) -> None:
    from vmss_terminate_sim.emulator.arm import resourcegraph

    state.rg_page_size = 7
    first = _query(graph, Scope().query())
    for group in range(resourcegraph.CACHED_RESULTS + 2):
        _query(graph, Scope.build(resource_groups=[f"rg-fleet-{group}"]).query())
    assert len(resourcegraph._results(state)) <= resourcegraph.CACHED_RESULTS
    rows = list(first.data)
    token = first.skip_token
    while token:  # the evicted query still pages correctly: computed again
        page = _query(graph, Scope().query(), skip_token=token)
        rows.extend(page.data)
        token = page.skip_token
    assert len({r["id"] for r in rows}) == 30


def test_skip_token_of_another_query_is_refused(graph: Any, state: ArmState) -> None:
    from azure.core.exceptions import HttpResponseError

    state.rg_page_size = 7
    token = _query(graph, Scope().query()).skip_token
    with pytest.raises(HttpResponseError) as caught:
        _query(graph, Scope.build(resource_groups=["rg-fleet-0"]).query(), skip_token=token)
    assert caught.value.status_code == 400


def test_selectors_filter_rows(graph: Any, state: ArmState) -> None:
    sub = fleetgen.subscription_id(1)
    query = Scope.build(resource_groups=["RG-FLEET-0"], name="vmss-00[0-2]?").query()
    query = query.replace("| project", "| where tags['env'] =~ 'PROD'\n| project")
    rows, _ = _all_rows(graph, query, subscriptions=[sub])
    expected = [ss for ss in state.scale_sets(sub, "rg-fleet-0")
                if ss.tags.get("env") == "prod" and ss.name[:7] in ("vmss-00", "vmss-01", "vmss-02")]
    assert rows and {r["name"] for r in rows} == {ss.name for ss in expected}


def test_management_group_scope(graph: Any) -> None:
    rows, _ = _all_rows(graph, Scope().query(), management_groups=["mg-prod"])
    assert {r["subscriptionId"] for r in rows} == {fleetgen.subscription_id(0), fleetgen.subscription_id(2)}


@pytest.mark.parametrize("query", [
    "resources | take 5",
    "resources | where type =~ 'microsoft.compute/virtualmachines' | project id",
    "resources | where type =~ 'microsoft.compute/virtualmachinescalesets' | where location == 'westus' "
    "| project id, name, type, subscriptionId, resourceGroup, location, tags, sku, properties",
    "resources | where type =~ 'microsoft.compute/virtualmachinescalesets' | project name, location",
    "resources | where type =~ 'microsoft.compute/virtualmachinescalesets' | project id, mode = props.mode",
    "resources | where type =~ 'microsoft.compute/virtualmachinescalesets' "
    "| project id, name, type, subscriptionId, resourceGroup, location, tags, sku, properties | limit 3",
])
def test_queries_outside_the_grammar_get_resource_graphs_error_shape(http: requests.Session, arm: ArmServers,
                                                                     query: str) -> None:
    answer = http.post(arm.arm_url + RG_PATH, params=GRAPH_API, json={"query": query}, timeout=5)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "BadRequest"
    assert [d["code"] for d in error["details"]] == ["InvalidQuery", "ParserFailure"]


def test_parser_rejects_what_it_does_not_serve() -> None:
    with pytest.raises(QueryError):
        parse_query(Scope().query().replace("order by id asc", "order by name asc"))
    tagged = Scope.build(resource_groups=["a", "b"]).query().replace("| project", "| where tags['k'] == 'v\\'x'\n| project")
    assert parse_query(tagged).tags == [("k", "v'x", True)]


def test_tag_filters_follow_kql_semantics() -> None:
    """An honest oracle: `tags['KEY']` looks the name up exactly (KQL), `=~` ignores the value's case,
    `==` does not."""
    state = ArmState()
    state.add_scale_set(SUB0, "rg", "upper", capacity=1, tags={"env": "Prod"})
    state.add_scale_set(SUB0, "rg", "lower", capacity=1, tags={"env": "prod"})
    state.add_scale_set(SUB0, "rg", "other-name-case", capacity=1, tags={"Env": "Prod"})
    sets = state.scale_sets(SUB0, "rg")

    def selected(clause: str) -> List[str]:
        query = parse_query(Scope().query().replace("| project", f"| where {clause}\n| project"))
        return sorted(ss.name for ss in sets if query.matches(ss))

    assert selected("tags['env'] == 'Prod'") == ["upper"]
    assert selected("tags['env'] =~ 'prod'") == ["lower", "upper"]


def test_more_than_1000_subscriptions_are_refused(http: requests.Session, arm: ArmServers) -> None:
    subs = [f"00000000-0000-0000-0001-{i:012d}" for i in range(1001)]
    answer = http.post(arm.arm_url + RG_PATH, params=GRAPH_API, json={"query": Scope().query(), "subscriptions": subs},
                       timeout=5)
    assert answer.status_code == 400
    assert answer.json()["error"]["details"][0]["code"] == "TooManySubscriptions"


def test_subscriptions_from_a_generated_seed_have_display_names(http: requests.Session, arm: ArmServers) -> None:
    answer = http.get(arm.arm_url + "/subscriptions", params={"api-version": "2022-12-01"}, timeout=5)
    names = {s["subscriptionId"]: s["displayName"] for s in answer.json()["value"]}
    assert names[fleetgen.subscription_id(2)] == "Fleet subscription 03"


def test_generated_estate_mix() -> None:
    seed = fleetgen.generate({"scaleSets": 200, "subscriptions": 5, "capacity": 20})
    sets = seed["scaleSets"]
    assert len(sets) == 200 and len(seed["subscriptions"]) == 5
    per_sub = {s["subscription"] for s in sets if s.get("priority") == "Spot"}
    assert len(per_sub) == 5  # every subscription gets the special cases
    assert sum(1 for s in sets if any(k.startswith("aks-managed-") for k in s["tags"])) == 10
    assert sum(1 for s in sets if s.get("scaleInPolicy", {}).get("forceDeletion")) == 10
    assert sum(1 for s in sets if s.get("automaticRepairsPolicy", {}).get("enabled")) == 10


def test_example_seeds_load() -> None:
    for name in ("seed.json", "fleet-seed.json"):
        state = ArmState()
        created = state.load_seed(ROOT / "examples" / name)
        assert created
    state = ArmState()
    state.load_seed(ROOT / "examples" / "fleet-seed.json")
    subs = {ss.subscription for ss in state.scale_sets()}
    assert len(subs) >= 2
    spot = [ss for ss in state.scale_sets() if ss.vm_profile.get("priority") == "Spot"]
    assert spot


# ---------------------------------------------------------------- quotas


@pytest.fixture
def quota_state(clock: ManualClock) -> ArmState:
    state = ArmState(clock=clock)
    state.add_scale_set("00000000-0000-0000-0000-000000000000", "rg", "myvmss", capacity=2)
    state.add_scale_set("00000000-0000-0000-0000-0000000000bb", "rg", "other", capacity=2)
    return state


def _patch(http: requests.Session, arm: ArmServers, **kw: Any) -> requests.Response:
    body = {"properties": {"virtualMachineProfile": {"scheduledEventsProfile": {
        "terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}}}}}
    return http.patch(vmss_url(arm, **kw), params={"api-version": "2024-11-01"}, json=body, timeout=5)


def test_quotas_are_off_by_default(http: requests.Session, arm: ArmServers, quota_state: ArmState) -> None:
    arm.reset(quota_state)
    answer = http.get(vmss_url(arm), params={"api-version": "2024-11-01"}, timeout=5)
    assert answer.status_code == 200
    assert "x-ms-ratelimit-remaining-subscription-reads" not in answer.headers


def test_write_quota_answers_429_per_subscription_until_tokens_return(
        http: requests.Session, arm: ArmServers, quota_state: ArmState, clock: ManualClock) -> None:
    arm.reset(quota_state)
    quota_state.load_seed({"quotas": {"writes": {"bucket": 2, "refillPerSecond": 0.5}}})
    first, second, third = (_patch(http, arm) for _ in range(3))
    assert [first.status_code, second.status_code] == [200, 200]
    assert second.headers["x-ms-ratelimit-remaining-subscription-writes"] == "0"
    assert third.status_code == 429
    assert third.headers["Retry-After"] == "2"
    assert third.json()["error"]["code"] == "SubscriptionRequestsThrottled"
    # another subscription has its own bucket; reads are not limited here
    assert _patch(http, arm, name="other", sub="00000000-0000-0000-0000-0000000000bb").status_code == 200
    assert http.get(vmss_url(arm), params={"api-version": "2024-11-01"}, timeout=5).status_code == 200
    clock.advance(2)
    assert _patch(http, arm).status_code == 200


def test_read_quota_sends_remaining_header(http: requests.Session, arm: ArmServers, quota_state: ArmState) -> None:
    arm.reset(quota_state)
    quota_state.load_seed({"quotas": {"reads": {"bucket": 3, "refillPerSecond": 1}}})
    answers = [http.get(vmss_url(arm), params={"api-version": "2024-11-01"}, timeout=5) for _ in range(4)]
    assert [a.status_code for a in answers] == [200, 200, 200, 429]
    assert [a.headers["x-ms-ratelimit-remaining-subscription-reads"] for a in answers] == ["2", "1", "0", "0"]


def test_fleet_seed_example_is_valid_json() -> None:
    data = json.loads((ROOT / "examples" / "fleet-seed.json").read_text())
    assert "subscriptions" in data and "scaleSets" in data
