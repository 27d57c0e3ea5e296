"""templates/central/: the handler's Deployment runs one replica with least RBAC, the role and the
unit say what the handler does, and every command in them is one `central run` accepts."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import yaml
from helpers import invoke_cli

from vmss_terminate import cli

ROOT = Path(__file__).resolve().parents[2] / "templates" / "central"


def test_deployment_is_one_replica_with_least_rbac() -> None:
    docs = {d["kind"]: d for d in yaml.safe_load_all((ROOT / "kubernetes.yaml").read_text()) if d}
    deployment = docs["Deployment"]
    assert deployment["spec"]["replicas"] == 1 and deployment["spec"]["strategy"]["type"] == "Recreate"
    rules = {(tuple(r["apiGroups"]), r["resources"][0]): set(r["verbs"]) for r in docs["ClusterRole"]["rules"]}
    assert rules[(("",), "nodes")] == {"get", "list", "patch"}
    assert rules[(("",), "pods")] == {"get", "list"}
    assert rules[(("",), "pods/eviction")] == {"create"}
    assert not any("delete" in verbs or "*" in verbs for verbs in rules.values())
    container = deployment["spec"]["template"]["spec"]["containers"][0]
    assert container["args"][:2] == ["central", "run"] and "--kubernetes" in container["args"]
    assert docs["ServiceAccount"]["metadata"]["annotations"]["azure.workload.identity/client-id"]


def test_role_grants_what_the_handler_calls_and_nothing_to_write_scale_sets() -> None:
    role = json.loads((ROOT / "azure-role.json").read_text())
    actions = set(role["Actions"])
    assert {"Microsoft.ResourceGraph/resources/read", "Microsoft.Maintenance/scheduledevents/acknowledge/action",
            "Microsoft.Compute/virtualMachineScaleSets/virtualMachines/runCommand/action"} <= actions
    assert not any(a.endswith("/write") or a.endswith("/delete") or a.endswith("*") for a in actions)


def test_the_unit_runs_a_command_central_run_accepts() -> None:
    unit = (ROOT / "vmss-terminate-central.service").read_text()
    line = unit.split("ExecStart=", 1)[1].split("\nRestart=", 1)[0].replace("\\\n", " ")
    argv = shlex.split(line.replace("${STATE_DIRECTORY}", "/tmp"))
    assert argv[1:3] == ["central", "run"]
    result = invoke_cli(cli.main, [*argv[1:], "--help"])
    assert result.exit_code == 0, result.output
