"""templates/kubernetes and `render --format kubernetes`: one source for the manifests, the least
RBAC, a DaemonSet whose command line the real agent accepts, and the real kubectl reading every
manifest against the Kubernetes API emulator.

If the template test fails after a change to vmss_terminate/iac/kubernetes.py, regenerate:
    python tests/iac/test_kubernetes.py --write
"""

from __future__ import annotations

import base64
import json
import shlex
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Dict, List, Tuple

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))

from helpers import cli_command, invoke_cli, poll_until  # noqa: E402
from kube_helpers import KUBECTL, Kubectl, needs_kubectl, serve_for_kubectl  # noqa: E402

from vmss_terminate.cli import main  # noqa: E402
from vmss_terminate.iac import kubernetes  # noqa: E402
from vmss_terminate.pipeline.probes import parse_listen  # noqa: E402
from vmss_terminate_sim.emulator.kube import NODES, KubeState, start_kube  # noqa: E402
from vmss_terminate_sim.emulator.kube.kinds import SECRETS  # noqa: E402

TEMPLATES = ROOT / "templates" / "kubernetes"
GENERATED = {"vmss-terminate.yaml": kubernetes.render_kubernetes, "host/host-rbac.yaml": kubernetes.render_host}


def _docs(text: str) -> List[Dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all(text) if doc]


def _by_kind(docs: List[Dict[str, Any]]) -> Dict[str, Dict[str, Any]]:
    return {doc["kind"]: doc for doc in docs}


@pytest.mark.parametrize("relative", sorted(GENERATED))
def test_templates_are_what_the_package_renders(relative: str) -> None:
    assert (TEMPLATES / relative).read_text(encoding="utf-8") == GENERATED[relative](), (
        "stale template: python tests/iac/test_kubernetes.py --write")


def test_the_yaml_reads_back_as_the_manifests() -> None:
    assert _docs(kubernetes.render_kubernetes()) == kubernetes.manifests()
    assert _docs(kubernetes.render_host()) == kubernetes.host_manifests()


def test_rbac_is_the_least_the_agent_needs() -> None:
    kinds = _by_kind(kubernetes.manifests())
    assert kinds["ClusterRole"]["rules"] == [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    ]
    assert kinds["Role"]["metadata"]["namespace"] == "default"  # events only where node events live
    assert kinds["Role"]["rules"] == [{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]}]
    subject = {"kind": "ServiceAccount", "name": "vmss-terminate", "namespace": "kube-system"}
    assert kinds["ClusterRoleBinding"]["subjects"] == [subject] == kinds["RoleBinding"]["subjects"]
    assert kinds["ClusterRoleBinding"]["roleRef"]["name"] == kinds["ClusterRole"]["metadata"]["name"]
    assert kinds["RoleBinding"]["roleRef"]["name"] == kinds["Role"]["metadata"]["name"]


def test_the_daemonset_runs_on_every_node_with_probes_and_scraping() -> None:
    kinds = _by_kind(kubernetes.manifests())
    spec = kinds["DaemonSet"]["spec"]
    pod = spec["template"]["spec"]
    (container,) = pod["containers"]
    assert pod["tolerations"] == [{"operator": "Exists"}]  # every taint, including its own and cordon's
    assert pod["serviceAccountName"] == kinds["ServiceAccount"]["metadata"]["name"]
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in container["env"]}
    assert env == {"NODE_NAME": "spec.nodeName", "POD_IP": "status.podIP"}
    args = container["args"]
    assert args[:3] == ["agent", "run", "--kubernetes"]
    listen = args[args.index("--listen") + 1]
    port = container["ports"][0]["containerPort"]
    assert listen == f"[$(POD_IP)]:{port}" and container["ports"][0]["name"] == "http"
    assert container["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    annotations = spec["template"]["metadata"]["annotations"]
    assert annotations == {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
                           "prometheus.io/path": "/metrics"}
    labels = spec["template"]["metadata"]["labels"]
    assert all(labels[k] == v for k, v in spec["selector"]["matchLabels"].items())
    assert pod["securityContext"]["runAsNonRoot"] is True
    state = args[args.index("--state-file") + 1]
    assert any(state.startswith(m["mountPath"] + "/") for m in container["volumeMounts"])


def _agent_accepts(argv: List[str]) -> None:
    """The real `agent run` command parses `argv` (its options after `agent run`)."""
    command = cli_command("agent", "run")
    names = {opt for param in command.params for opt in param.opts}
    if "--kubernetes" not in names:
        pytest.skip("agent run --kubernetes is not on this tree yet (issue 19 item 1)")
    ctx = command.make_context("run", list(argv), resilient_parsing=False)
    assert ctx.params["kubernetes"] is True


@pytest.mark.parametrize("pod_ip, host", [("10.0.0.4", "10.0.0.4"), ("fd00:10:244::4", "fd00:10:244::4")])
def test_the_daemonset_command_line_is_the_agents(pod_ip: str, host: str) -> None:
    """On an IPv4 and on an IPv6-primary node (status.podIP is then an IPv6 address): with
    `$(POD_IP):9102` the agent refused the IPv6 form at start, so the pod crash-looped."""
    container = _by_kind(kubernetes.manifests())["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]
    argv = [a.replace("$(POD_IP)", pod_ip) for a in container["args"][2:]]
    _agent_accepts(argv)
    port = container["ports"][0]["containerPort"]
    assert parse_listen(argv[argv.index("--listen") + 1], any_port=False) == (host, port)


def test_the_systemd_drop_in_runs_the_agent_with_the_hosts_kubeconfig() -> None:
    lines = [line for line in (TEMPLATES / "host" / "kubernetes.conf").read_text().splitlines()
             if line and not line.startswith("#")]
    assert lines[:3] == ["[Service]", "ExecStart=", lines[2]]
    argv = shlex.split(lines[2].split("=", 1)[1])
    assert argv[:3] == ["/opt/vmss-terminate/venv/bin/vmss-terminate", "agent", "run"]
    assert argv[argv.index("--kubeconfig") + 1] == "/etc/vmss-terminate/kubeconfig"
    assert argv[-1] == "$VMSS_TERMINATE_AGENT_ARGS"  # as in templates/systemd/vmss-terminate.service
    _agent_accepts(argv[3:-1])


def test_the_dockerfile_is_the_lean_install_as_the_daemonsets_user() -> None:
    text = (TEMPLATES / "Dockerfile").read_text()
    instructions = [line.split(None, 1) for line in text.splitlines() if line and not line.startswith(("#", " "))]
    first = {word: rest for word, *rests in instructions for rest in rests[:1] if word.isupper()}
    assert first["FROM"].startswith("python:3") and first["FROM"].endswith("-slim")
    assert first["ARG"] == "PIP_ARGS=vmss-terminate"  # the lean install: no [control] extra
    assert "[" not in first["ARG"]
    pod = _by_kind(kubernetes.manifests())["DaemonSet"]["spec"]["template"]["spec"]
    assert first["USER"] == f"{pod['securityContext']['runAsUser']}:{pod['securityContext']['runAsGroup']}"
    assert first["ENTRYPOINT"] == '["vmss-terminate"]'
    assert first["CMD"] == '["agent", "run", "--kubernetes"]'


def test_render_prints_the_manifests_for_the_given_options() -> None:
    result = invoke_cli(main, ["render", "--format", "kubernetes", "--namespace", "ops", "--image",
                               "example.azurecr.io/vmss-terminate:1.2.3", "--metrics-port", "9200",
                               "--agent-arg=--taint", "--agent-arg=example.com/draining=true:NoSchedule"])
    assert result.exit_code == 0, result.output
    kinds = _by_kind(_docs(result.output))
    container = kinds["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]
    assert container["image"] == "example.azurecr.io/vmss-terminate:1.2.3"
    assert container["args"][-2:] == ["--taint", "example.com/draining=true:NoSchedule"]
    assert "[$(POD_IP)]:9200" in container["args"]
    assert kinds["DaemonSet"]["metadata"]["namespace"] == kinds["ServiceAccount"]["metadata"]["namespace"] == "ops"
    assert kinds["ClusterRoleBinding"]["subjects"][0]["namespace"] == "ops"


@pytest.mark.parametrize("args, message", [
    (["--timeout", "10m"], "takes no --timeout"),
    (["--namespace", "Not_A_Label"], "invalid --namespace"),
    (["--image", "has space"], "invalid --image"),
    (["--image", ""], "invalid --image ''"),  # not silently the default image
    (["--agent-arg=--retry-for", "--agent-arg=5"], "--retry-for applies to run --once"),
    (["--agent-arg=--bogus"], "No such option: --bogus"),
    (["--agent-arg=--safety-margin", "--agent-arg=900"], "invalid --safety-margin 900"),
    (["--agent-arg=--taint", "--agent-arg=not a taint"], "--agent-arg"),
    (["--agent-arg=--once"], "crash-loop"),
    (["--agent-arg=--state-file=/tmp/s.json"], "--state-file is not for --agent-arg"),
    (["--agent-arg=--hook", "--agent-arg=/opt/x 'unbalanced"], "--agent-arg"),
])
def test_render_kubernetes_refuses_bad_input(args: List[str], message: str) -> None:
    result = invoke_cli(main, ["render", "--format", "kubernetes", *args])
    assert result.exit_code == 2 and message in result.output


def test_render_takes_agent_args_the_node_can_run() -> None:
    """A hook's program is the image's, not this machine's: not looked for here."""
    result = invoke_cli(main, ["render", "--format", "kubernetes", "--agent-arg=--hook",
                               "--agent-arg=/opt/not-here/drain.sh --fast", "--agent-arg=--safety-margin=1e2"])
    assert result.exit_code == 0, result.output
    args = _by_kind(_docs(result.output))["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[-3:] == ["--hook", "/opt/not-here/drain.sh --fast", "--safety-margin=1e2"]


def test_kubernetes_options_need_the_kubernetes_format() -> None:
    result = invoke_cli(main, ["render", "--format", "arm", "--timeout", "10m", "--image", "x"])
    assert result.exit_code == 2 and "--image: only with --format kubernetes" in result.output


@needs_kubectl
@pytest.mark.parametrize("relative", sorted(GENERATED))
def test_kubectl_reads_and_maps_every_manifest(relative: str, tmp_path: Path) -> None:
    """A server-side dry run: kubectl parses the file, maps every kind through discovery and POSTs
    it; the emulator checks what a server would (selector matching the template labels, ...)."""
    with serve_for_kubectl() as kube:
        kubectl = Kubectl(kube, tmp_path)
        out = kubectl.ok("apply", "--dry-run=server", "--validate=false", "-f", str(TEMPLATES / relative))
    created = [line for line in out.splitlines() if line.endswith("created (server dry run)")]
    assert len(created) == len(_docs(GENERATED[relative]()))


@needs_kubectl
def test_rendered_manifests_apply_for_another_namespace(tmp_path: Path) -> None:
    with serve_for_kubectl() as kube:
        kubectl = Kubectl(kube, tmp_path)
        namespace = "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ops\n---\n"
        text = namespace + kubernetes.render_kubernetes(namespace="ops", image="example.azurecr.io/vmss-terminate:1.2.3")
        kubectl.ok("apply", "--validate=false", "-f", "-", stdin=text)
        image = kubectl.ok("get", "daemonset", "-n", "ops", "vmss-terminate",
                           "-o", "jsonpath={.spec.template.spec.containers[0].image}")
    assert image == "example.azurecr.io/vmss-terminate:1.2.3"


@needs_kubectl
def test_the_host_kubeconfig_commands_run_as_printed(tmp_path: Path) -> None:
    """host-rbac.yaml's header commands, run by bash as printed (paths moved under tmp_path), make a
    kubeconfig whose ServiceAccount token the API server (here, the emulator) accepts."""
    state = KubeState()
    state.add_node("vmss000000")
    with serve_for_kubectl(state) as kube:
        admin = Kubectl(kube, tmp_path)
        admin.ok("apply", "--validate=false", "-f", str(TEMPLATES / "host" / "host-rbac.yaml"))
        etc = tmp_path / "etc"
        commands = [line[1:].strip() for line in kubernetes.HOST_HEADER.splitlines()
                    if line.startswith("#   ") and "apply -f" not in line]
        script = "\n".join(["set -euo pipefail"] + [c.replace("/etc/vmss-terminate", str(etc)) for c in commands])
        env = dict(admin.env, KUBECONFIG=str(admin.kubeconfig), SERVER=kube.url,
                   PATH=f"{Path(str(KUBECTL)).parent}:{admin.env.get('PATH', '')}")
        done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, env=env, timeout=60)
        assert done.returncode == 0, done.stderr
        host = etc / "kubeconfig"
        assert oct(host.stat().st_mode & 0o777) == "0o600"
        result = subprocess.run([str(KUBECTL), "--kubeconfig", str(host), "--cache-dir", str(tmp_path / "c2"),
                                 "cordon", "vmss000000"], capture_output=True, text=True, env=admin.env, timeout=60)
        assert result.returncode == 0, result.stderr
        token = base64.b64decode(kube.state.get(SECRETS, "kube-system", "vmss-terminate-token")["data"]["token"])
        assert token.decode() != kube.token
        assert kube.state.get(NODES, "", "vmss000000")["spec"]["unschedulable"] is True


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    for name, produce in GENERATED.items():
        (TEMPLATES / name).write_text(produce(), encoding="utf-8")
        print(f"wrote templates/kubernetes/{name}")


def _drain_as_the_templates_account(tmp_path: Path, rules: Any = None) -> Tuple[KubeState, Any, Any]:
    """The real agent drains its node with the token of host-rbac.yaml's ServiceAccount (RBAC enforced
    by the emulator), `rules` replacing the ClusterRole's; returns the state, the API's request log
    and the IMDS group once an approval arrived or a 403 was answered."""
    from vmss_terminate.agent import Agent, AgentConfig
    from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
    from vmss_terminate_sim.emulator.kube.launch import kubeconfig
    from vmss_terminate_sim.emulator.server import EmulatorServer

    state = KubeState()
    for doc in kubernetes.host_manifests():
        if doc["kind"] == "ClusterRole" and rules is not None:
            doc = dict(doc, rules=rules)
        state.add_object(doc)
    token = base64.b64decode(state.get(SECRETS, "kube-system", "vmss-terminate-token")["data"]["token"]).decode()
    state.add_node("vmss000003")
    state.add_node("vmss000001")
    state.add_pod("web-1", "vmss000003", owner="ReplicaSet/web", grace=0)
    state.add_daemonset("log-agent", namespace="kube-system")
    state.add_pod("log-agent-1", "vmss000003", namespace="kube-system", owner="DaemonSet/log-agent")
    group = PlacementGroup(auto_start=False)
    with EmulatorServer(ImdsEmulator(group, vm_name="vmss_3", rate_limit=None)) as imds, \
            start_kube(state, token="admin-token") as kube:
        config = tmp_path / "kubeconfig"
        config.write_text(json.dumps(kubeconfig(kube.url, token)))
        agent = Agent(AgentConfig(imds_url=imds.url, state_file=":memory:", poll_interval=0.2, kubernetes=True,
                                  kubeconfig=str(config), node_name="vmss000003", max_requests_per_second=200,
                                  request_timeout=2.0, first_call_timeout=2.0, stop_grace=0.0, kill_grace=1.0))
        group.add_event("Terminate", ["vmss_3"], not_before=time.time() + 600)
        stop = threading.Event()
        thread = threading.Thread(target=agent.run, args=(stop,), daemon=True)
        thread.start()
        try:
            assert poll_until(lambda: bool(group.approvals) or kube.server.log.count() and any(
                r.status == 403 for r in kube.server.log.all()), timeout=30)
        finally:
            stop.set()
            thread.join(15)
        return state, kube.server.log, group


def test_the_templates_rbac_is_enough_for_the_agents_drain(tmp_path: Path) -> None:
    state, log, group = _drain_as_the_templates_account(tmp_path)
    assert [r.status for r in log.all() if r.status == 403] == []
    assert len(group.approvals) == 1
    assert [(e.name, e.code) for e in state.evictions] == [("web-1", 200)]
    assert state.get(NODES, "", "vmss000003")["spec"]["unschedulable"] is True
    assert {e["reason"] for e in state.events()} >= {"TerminateNotice"}


def test_without_the_eviction_rule_the_agent_is_forbidden(tmp_path: Path) -> None:
    """The control: the emulator enforces RBAC, so the test above could fail."""
    rules = [rule for rule in kubernetes.cluster_rules() if rule["resources"] != ["pods/eviction"]]
    state, log, _ = _drain_as_the_templates_account(tmp_path, rules)
    forbidden = [r for r in log.all() if r.status == 403]
    assert forbidden and all(r.method == "POST" and r.path.endswith("/eviction") for r in forbidden)
    assert state.evictions == []
