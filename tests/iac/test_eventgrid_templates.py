"""templates/*/eventgrid-queue*: the Event Grid -> Storage queue setup for `central run --source queue`,
parsed by the same tools as the other templates (pycep-parser, json, python-hcl2) and checked against
the values the product uses (iac/eventgrid.py, central/leases.py, scheduled_events)."""

from __future__ import annotations

import json
import shlex
from typing import Any, Dict, List

import hcl2
import pytest
from helpers import invoke_cli

from vmss_terminate import scheduled_events
from vmss_terminate.central.leases import DEFAULT_CONTAINER
from vmss_terminate.central.storage_queue import POISON_SUFFIX
from vmss_terminate.cli import main
from vmss_terminate.iac import eventgrid
from vmss_terminate.iac.render import render

from .conftest import TEMPLATES, load_json

SUB = "00000000-0000-0000-0000-000000000000"
PRINCIPAL = "11111111-1111-1111-1111-111111111111"


def test_the_product_and_the_templates_name_the_same_things() -> None:
    assert eventgrid.LEASE_CONTAINER == DEFAULT_CONTAINER and eventgrid.POISON_SUFFIX == POISON_SUFFIX
    assert eventgrid.EVENT_TYPES == scheduled_events.EVENT_GRID_TYPES
    assert eventgrid.TOPIC_TYPE == "Microsoft.ResourceNotifications.MaintenanceResources"


def _check_subscription(props: Dict[str, Any], types: Any) -> None:
    assert props["eventDeliverySchema"] == "EventGridSchema"
    assert props["destination"]["endpointType"] == "StorageQueue"
    assert list(types) == list(eventgrid.EVENT_TYPES)
    [advanced] = props["filter"]["advancedFilters"]
    assert advanced == {"operatorType": "StringContains", "key": "subject", "values": [eventgrid.SUBJECT_FILTER]}
    assert props["retryPolicy"] == {"maxDeliveryAttempts": eventgrid.MAX_DELIVERY_ATTEMPTS,
                                    "eventTimeToLiveInMinutes": eventgrid.EVENT_TTL_MINUTES}
    assert props["deadLetterDestination"]["endpointType"] == "StorageBlob"


def test_arm_template() -> None:
    template = load_json("arm/eventgrid-queue.json")
    by_type: Dict[str, List[Dict[str, Any]]] = {}
    for resource in template["resources"]:
        by_type.setdefault(resource["type"], []).append(resource)
    [topic] = by_type["Microsoft.EventGrid/systemTopics"]
    assert topic["location"] == "global"
    assert topic["properties"] == {"source": "[subscription().id]", "topicType": eventgrid.TOPIC_TYPE}
    [sub] = by_type["Microsoft.EventGrid/systemTopics/eventSubscriptions"]
    _check_subscription(sub["properties"], template["variables"]["scheduledEventTypes"])
    queues = [q["name"] for q in by_type["Microsoft.Storage/storageAccounts/queueServices/queues"]]
    assert any("-poison" in q for q in queues) and len(queues) == 2
    variables = template["variables"]
    assert variables["leaseContainerName"] == eventgrid.LEASE_CONTAINER
    assert variables["deadLetterContainerName"] == eventgrid.DEAD_LETTER_CONTAINER
    roles = by_type["Microsoft.Authorization/roleAssignments"]
    assert len(roles) == 4 and all("handlerPrincipalId" in r["condition"] for r in roles)
    assert {variables["storageQueueDataContributor"], variables["storageBlobDataContributor"]} == {
        eventgrid.STORAGE_QUEUE_DATA_CONTRIBUTOR, eventgrid.STORAGE_BLOB_DATA_CONTRIBUTOR}
    for resource in template["resources"]:
        assert resource["apiVersion"] >= "2022-04-01"


def test_bicep_template() -> None:
    pycep = pytest.importorskip("pycep", reason="pycep-parser (the Bicep parser) needs Python >= 3.10")
    module = pycep.BicepParser().parse(file_path=TEMPLATES / "bicep" / "eventgrid-queue.bicep")
    resources = module["resources"]
    topic = resources["systemTopic"]
    assert topic["type"] == "Microsoft.EventGrid/systemTopics" and topic["config"]["location"] == "global"
    assert topic["config"]["properties"]["topicType"] == eventgrid.TOPIC_TYPE
    props = resources["eventSubscription"]["config"]["properties"]
    _check_subscription(props, module["variables"]["scheduledEventTypes"]["value"])
    assert module["variables"]["leaseContainerName"]["value"] == eventgrid.LEASE_CONTAINER
    roles = [r for r in resources.values() if r["type"] == "Microsoft.Authorization/roleAssignments"]
    assert len(roles) == 4 and all("condition" in r["config"] for r in roles)
    decorators = {d["type"]: d.get("argument") for d in module["parameters"]["storageAccountName"]["decorators"]}
    assert (decorators["min_length"], decorators["max_length"]) == (3, 24)


def _unquote(value: Any) -> Any:
    if isinstance(value, str) and len(value) >= 2 and value[0] == value[-1] == '"':
        return value[1:-1]
    if isinstance(value, list):
        return [_unquote(v) for v in value]
    if isinstance(value, dict):
        return {_unquote(k): _unquote(v) for k, v in value.items() if k != "__is_block__"}
    return value


def test_terraform_module() -> None:
    with open(TEMPLATES / "terraform" / "eventgrid-queue" / "main.tf", encoding="utf-8") as handle:
        main = _unquote(hcl2.load(handle))
    resources = {f"{kind}.{name}": body for block in main["resource"] for kind, named in block.items()
                 for name, body in named.items()}
    topic = resources["azurerm_eventgrid_system_topic.scheduled_events"]
    assert topic["location"] == "global" and topic["topic_type"] == eventgrid.TOPIC_TYPE
    sub = resources["azurerm_eventgrid_system_topic_event_subscription.vmss_terminate"]
    assert sub["event_delivery_schema"] == "EventGridSchema"
    [filters] = sub["advanced_filter"]
    assert filters["string_contains"] == [{"key": "subject", "values": [eventgrid.SUBJECT_FILTER]}]
    assert sub["retry_policy"] == [{"max_delivery_attempts": eventgrid.MAX_DELIVERY_ATTEMPTS,
                                    "event_time_to_live": eventgrid.EVENT_TTL_MINUTES}]
    assert "storage_blob_dead_letter_destination" in sub and "storage_queue_endpoint" in sub
    [local] = main["locals"]
    assert local["scheduled_event_types"] == list(eventgrid.EVENT_TYPES)
    assert local["lease_container_name"] == eventgrid.LEASE_CONTAINER
    assert resources["azurerm_storage_queue.poison"]["name"] == "${var.queue_name}-poison"
    roles = [k for k in resources if k.startswith("azurerm_role_assignment.")]
    assert len(roles) == 4


def test_render_eventgrid_prints_the_setup_for_one_subscription() -> None:
    text = render("eventgrid", None, subscription=SUB, resource_group="rg", storage_account="acct1",
                  principal_id=PRINCIPAL)
    commands = [shlex.split(line) for line in text.splitlines() if line and not line.startswith("#")]
    assert [c[:3] for c in commands][:7] == [
        ["az", "storage", "account"], ["az", "storage", "queue"], ["az", "storage", "queue"],
        ["az", "storage", "container-rm"], ["az", "storage", "container-rm"],
        ["az", "eventgrid", "system-topic"], ["az", "eventgrid", "system-topic"]]
    sub = commands[6]
    assert sub[sub.index("--included-event-types") + 1:sub.index("--included-event-types") + 3] == list(
        eventgrid.EVENT_TYPES)
    assert sub[sub.index("--advanced-filter") + 1:sub.index("--advanced-filter") + 4] == [
        "subject", "StringContains", eventgrid.SUBJECT_FILTER]
    assert "scheduled-events-poison" in commands[2]
    assert sum(1 for c in commands if c[:3] == ["az", "role", "assignment"]) == 4
    # the acknowledge role by id: the built-in's roleName is "Scheduled Events Contributor", so the name
    # Learn writes (ScheduledEventContributor) would find no role
    [acknowledge] = [c for c in commands if c[:3] == ["az", "role", "assignment"] and f"/subscriptions/{SUB}" in c]
    assert acknowledge[acknowledge.index("--role") + 1] == "b67fe603-310e-4889-b9ee-8257d09d353d"
    assert all(f"/subscriptions/{SUB}" in " ".join(c) or "--subscription" in c for c in commands)


@pytest.mark.parametrize("args, message", [
    (["--subscription", SUB, "-g", "rg"], "needs --subscription, --resource-group and --storage-account"),
    (["--subscription", "nope", "-g", "rg", "--storage-account", "acct1"], "invalid --subscription"),
    (["--subscription", SUB, "-g", "rg", "--storage-account", "Bad_Name"], "invalid --storage-account"),
    (["--subscription", SUB, "-g", "rg", "--storage-account", "acct1", "--queue", "A"], "invalid --queue"),
    (["--subscription", SUB, "-g", "rg", "--storage-account", "acct1", "--timeout", "10"], "no --timeout"),
    (["--subscription", SUB, "-g", "rg", "--storage-account", "acct1", "--principal-id", "me"], "--principal-id"),
])
def test_render_eventgrid_bad_input_is_one_line_and_exit_2(args: List[str], message: str) -> None:
    result = invoke_cli(main, ["render", "--format", "eventgrid", *args])
    assert result.exit_code == 2 and message in result.output
    assert "Traceback" not in result.output


def test_eventgrid_options_belong_to_format_eventgrid() -> None:
    result = invoke_cli(main, ["render", "--format", "arm", "--timeout", "10", "--storage-account", "acct1"])
    assert result.exit_code == 2 and "only with --format eventgrid" in result.output


def test_the_arm_template_is_json_with_the_bicep_modules_parameters() -> None:
    arm = load_json("arm/eventgrid-queue.json")
    assert set(arm["parameters"]) == {"storageAccountName", "location", "queueName", "systemTopicName",
                                      "handlerPrincipalId", "acknowledgeRoleDefinitionId"}
    assert arm["parameters"]["acknowledgeRoleDefinitionId"]["defaultValue"] == eventgrid.ACKNOWLEDGE_ROLE
    assert json.loads(json.dumps(arm)) == arm
