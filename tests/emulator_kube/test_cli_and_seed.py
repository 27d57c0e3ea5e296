"""`vmss-terminate emulator kube` in the foreground (kubectl uses the kubeconfig it writes), and the
seed format (Kubernetes objects or the shorthand)."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Dict, List

import pytest
import requests
from helpers import interrupt, invoke_cli
from kube_helpers import KUBECTL, needs_kubectl, throwaway_ca

from vmss_terminate.cli import main
from vmss_terminate_sim.emulator.faults import FaultSpecError
from vmss_terminate_sim.emulator.kube import DAEMON_SETS, NODES, PDBS, PODS, KubeState, load_seed, start_kube

SEED: Dict[str, Any] = {
    "nodes": [{"name": "vmss000000", "providerID": "azure:///subscriptions/s/resourceGroups/rg/providers/"
                                                  "Microsoft.Compute/virtualMachineScaleSets/vmss/virtualMachines/0"}],
    "daemonSets": [{"name": "log-agent", "namespace": "kube-system"}],
    "replicaSets": [{"name": "web", "replicas": 2, "labels": {"app": "web"}}],
    "pods": [{"name": "web-1", "node": "vmss000000", "labels": {"app": "web"}, "owner": "ReplicaSet/web", "grace": 0},
             {"name": "log-agent-1", "node": "vmss000000", "namespace": "kube-system", "owner": "DaemonSet/log-agent"}],
    "podDisruptionBudgets": [{"name": "web", "selector": {"app": "web"}, "minAvailable": 1}],
}


def test_shorthand_seed_builds_the_cluster() -> None:
    state = KubeState()
    load_seed(state, SEED)
    node = state.get(NODES, "", "vmss000000")
    assert node["spec"]["providerID"].endswith("/virtualMachines/0")
    pod = state.get(PODS, "kube-system", "log-agent-1")
    owner = pod["metadata"]["ownerReferences"][0]
    assert (owner["kind"], owner["uid"]) == ("DaemonSet",
                                             state.get(DAEMON_SETS, "kube-system", "log-agent")["metadata"]["uid"])
    assert state.get(PDBS, "default", "web")["status"]["disruptionsAllowed"] == 0  # 1 healthy of minAvailable 1


def test_kubectl_json_objects_seed_round_trips() -> None:
    source = KubeState()
    load_seed(source, SEED)
    objects = [dict(obj) for kind in (NODES, DAEMON_SETS, PODS, PDBS) for obj in source.list(kind)]
    copy = KubeState()
    load_seed(copy, {"apiVersion": "v1", "kind": "List", "items": objects})
    assert [p["metadata"]["name"] for p in copy.list(PODS)] == [p["metadata"]["name"] for p in source.list(PODS)]


@pytest.mark.parametrize("seed, message", [
    ({"nodez": []}, "unknown seed keys: nodez"),
    ({"pods": [{"name": "p", "nod": "x"}]}, "unknown keys nod"),
    ({"items": [{"apiVersion": "v9", "kind": "Gadget", "metadata": {"name": "g"}}]}, "does not serve v9 Gadget"),
])
def test_bad_seeds_are_refused(seed: Dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_seed(KubeState(), seed)


def test_cli_refuses_a_bad_seed_and_a_key_without_a_certificate(tmp_path: Path) -> None:
    bad = tmp_path / "seed.json"
    bad.write_text(json.dumps({"nodez": []}))
    result = invoke_cli(main, ["emulator", "kube", "--seed", str(bad)])
    assert result.exit_code == 2 and "invalid seed" in result.output
    result = invoke_cli(main, ["emulator", "kube", "--tls-key", str(bad)])
    assert result.exit_code == 2 and "--tls-key needs --tls-cert" in result.output


def _read_json(proc: "subprocess.Popen[str]") -> Dict[str, Any]:
    lines: List[str] = []
    assert proc.stdout is not None
    for line in proc.stdout:
        lines.append(line)
        try:
            return json.loads("".join(lines))
        except ValueError:
            continue
    raise AssertionError(f"no JSON document: {''.join(lines)}")


@needs_kubectl
def test_cli_serves_in_the_foreground_for_kubectl(tmp_path: Path) -> None:
    seed = tmp_path / "seed.json"
    seed.write_text(json.dumps(SEED))
    kubeconfig = tmp_path / "kubeconfig"
    env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper() and not k.startswith("KUBE")}
    proc = subprocess.Popen([sys.executable, "-m", "vmss_terminate", "emulator", "kube", "--seed", str(seed),
                             "--kubeconfig-out", str(kubeconfig), "-o", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        started = _read_json(proc)
        assert started["url"].startswith("http://127.0.0.1:") and started["kubeconfig"] == str(kubeconfig)
        assert oct(kubeconfig.stat().st_mode & 0o777) == "0o600"
        result = subprocess.run([str(KUBECTL), "--kubeconfig", str(kubeconfig), "--cache-dir", str(tmp_path / "cache"),
                                 "get", "nodes", "-o", "name"], capture_output=True, text=True, timeout=60,
                                env=dict(env, HOME=str(tmp_path)))
        assert (result.returncode, result.stdout.split()) == (0, ["node/vmss000000"]), result.stderr
    finally:
        code = interrupt(proc)
    assert code == 0


@needs_kubectl
@pytest.mark.parametrize("tls", [False, True], ids=["http", "https"])
def test_the_banners_kubectl_commands_run_as_printed(tmp_path: Path, tls: bool) -> None:
    seed = tmp_path / "seed.json"
    drainable = dict(SEED, nodes=SEED["nodes"] + [{"name": "vmss000001"}], pods=SEED["pods"] + [  # the PDB allows one
        {"name": "web-2", "node": "vmss000001", "labels": {"app": "web"}, "owner": "ReplicaSet/web"}])
    seed.write_text(json.dumps(drainable))
    env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper() and not k.startswith("KUBE")}
    env["HOME"] = str(tmp_path)
    args = ["--seed", str(seed)]
    if tls:  # HTTPS with a random token: the printed flags carry the CA and the token
        ca, _ = throwaway_ca()
        ca.issue_cert("127.0.0.1").private_key_and_cert_chain_pem.write_to_path(str(tmp_path / "server.pem"))
        ca.cert_pem.write_to_path(str(tmp_path / "ca.pem"))
        args += ["--tls-cert", str(tmp_path / "server.pem"), "--tls-ca", str(tmp_path / "ca.pem")]
    proc = subprocess.Popen([sys.executable, "-m", "vmss_terminate", "emulator", "kube", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        lines: List[str] = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("Press Ctrl-C"):
                break
        commands = [line.strip() for line in lines if line.startswith("  kubectl ")]
        assert [c.split()[-1] for c in commands] == ["nodes", "--delete-emptydir-data"]
        for command in commands:
            done = subprocess.run(shlex.split(command) + ["--request-timeout=20s"], capture_output=True, text=True,
                                  env=env, timeout=60)
            assert done.returncode == 0, f"{command}: {done.stderr}"
        assert "node/vmss000000 drained" in done.stdout
    finally:
        code = interrupt(proc)
    assert code == 0


def test_the_emulator_serves_on_the_lean_install(tmp_path: Path) -> None:
    """No Azure SDK (tests/no_azure.py blocks it): `emulator kube` starts and answers discovery."""
    blocker = Path(__file__).resolve().parents[1] / "no_azure.py"
    env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
    proc = subprocess.Popen([sys.executable, str(blocker), "emulator", "kube", "-o", "json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        url = _read_json(proc)["url"]
        answer = requests.get(url + "/api/v1", timeout=5)
        assert answer.status_code == 200 and answer.json()["groupVersion"] == "v1"
    finally:
        code = interrupt(proc)
    assert code == 0, proc.stderr.read() if proc.stderr else ""


def _documented_commands() -> List[str]:
    text = (Path(__file__).resolve().parents[2] / "docs" / "emulators.md").read_text(encoding="utf-8")
    section = text.split("## The Kubernetes API emulator", 1)[1]
    block = section.split("```bash\n", 1)[1].split("```", 1)[0]
    return [line for line in block.splitlines() if line.strip()]


@needs_kubectl
@pytest.mark.slow  # the seed's real 2 s grace periods
def test_the_documented_session_runs_as_written(tmp_path: Path) -> None:
    """docs/emulators.md's commands, from a directory holding examples/kube-seed.json."""
    start, *kubectl_lines = _documented_commands()
    assert start.startswith("vmss-terminate emulator kube ") and start.endswith(" &")
    (tmp_path / "examples").mkdir()
    shutil.copy(Path(__file__).resolve().parents[2] / "examples" / "kube-seed.json", tmp_path / "examples")
    env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper() and not k.startswith("KUBE")}
    env["HOME"] = str(tmp_path)
    args = shlex.split(start[:-1])[1:]
    proc = subprocess.Popen([sys.executable, "-m", "vmss_terminate", *args, "-o", "json"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        _read_json(proc)
        outputs = []
        for line in kubectl_lines:
            done = subprocess.run(shlex.split(line), cwd=tmp_path, capture_output=True, text=True, env=env, timeout=60)
            assert done.returncode == 0, f"{line}: {done.stderr}"
            outputs.append(done.stdout)
    finally:
        code = interrupt(proc)
    assert code == 0
    assert "node/vmss000000 drained" in outputs[1]
    header, *rows = outputs[2].splitlines()
    assert header.split()[:7] == ["NAMESPACE", "NAME", "READY", "STATUS", "RESTARTS", "AGE", "IP"]
    pods = {row.split()[1]: row.split()[7] for row in rows}  # NODE
    assert pods["cache-0"] == "vmss000001"  # the StatefulSet pod came back, on the node that can take it
    assert pods["kube-proxy-vmss000000"] == pods["log-agent-x1"] == "vmss000000"


@pytest.mark.parametrize("command", [["emulator", "kube"], ["emulator", "imds"]])
def test_an_answer_fault_is_refused_by_the_emulators_that_would_ignore_it(command: List[str]) -> None:
    result = invoke_cli(main, [*command, "--fault", "stuck,path=/operations/"])
    assert result.exit_code == 2, result.output
    assert len(result.stderr.strip().splitlines()) == 1
    assert "only the ARM emulator acts on answer faults (stuck)" in result.stderr
    assert "Traceback" not in result.output


def test_start_kube_refuses_an_answer_fault_over_http_and_from_python() -> None:
    with start_kube(KubeState()) as servers:
        answer = requests.post(servers.url + "/emulator/faults", json={"stuck": True}, timeout=5)
        assert answer.status_code == 400 and "only the ARM emulator" in answer.json()["error"]
        with pytest.raises(FaultSpecError):
            servers.server.faults.add(foreign_link="http://127.0.0.2:1")
        assert servers.server.faults.queued() == []


@needs_kubectl
def test_a_token_over_http_prints_no_kubectl_line_and_says_why(tmp_path: Path) -> None:
    """Issue 28 item 7: `--token X` over http printed `kubectl --server http://... --token X`, which
    kubectl refuses (it sends bearer tokens over HTTPS only) and the server then answers 401; the
    banner now prints no kubectl line and says what would work."""
    env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper() and not k.startswith("KUBE")}
    env["HOME"] = str(tmp_path)
    proc = subprocess.Popen([sys.executable, "-m", "vmss_terminate", "emulator", "kube", "--token", "s3cret"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    try:
        assert proc.stdout is not None
        lines: List[str] = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("Press Ctrl-C"):
                break
        text = "".join(lines)
        url = lines[0].split()[3]
        assert not [line for line in lines if line.strip().startswith("kubectl ")], text
        assert "No kubectl command works" in text and "--tls-cert" in text and "drop --token" in text
        # why: the line it used to print fails against this very server
        done = subprocess.run([str(KUBECTL), "--server", url, "--token", "s3cret", "--cache-dir",
                               str(tmp_path / "cache"), "get", "nodes", "--request-timeout=20s"],
                              capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode != 0, done.stdout
    finally:
        code = interrupt(proc)
    assert code == 0
