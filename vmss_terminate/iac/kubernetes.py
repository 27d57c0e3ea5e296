"""`render --format kubernetes`: the agent as a DaemonSet, with its ServiceAccount and least RBAC.

One source for the manifests: `manifests()` builds them as plain objects, `to_yaml()` prints them,
and `templates/kubernetes/vmss-terminate.yaml` is exactly `render_kubernetes()` with the defaults
(a test keeps them equal), so the template and the command never drift.

What the agent needs from the API, and nothing more (RBAC):
  * nodes: get, list, patch -- find its node (by name, providerID or computer name), cordon, taint;
  * pods: get, list -- the pods on the node, and whether each evicted one is gone;
  * pods/eviction: create -- the Eviction API (so PodDisruptionBudgets are honoured);
  * events (events.k8s.io) create, in namespace `default` only (where node events live): a Role there.

The pod: on every node (tolerates every taint, `system-node-critical` so it is the last to go),
`NODE_NAME` from the downward API, `--listen [$(POD_IP)]:PORT` for the probes and Prometheus
(brackets: an IPv6-primary node's pod IP needs them, and the agent reads `[10.0.0.4]:PORT` too)
(`/healthz` liveness, `/readyz` readiness, scrape annotations), host network so IMDS at
169.254.169.254 is reachable whatever the CNI or network policies say, the journal on an emptyDir
(survives container restarts: a restarted agent resumes its drain), non-root, read-only root file
system, no capabilities.
"""

from __future__ import annotations

import json
import re
from typing import Any, Dict, List, Optional, Sequence

from vmss_terminate import __version__

DEFAULT_NAMESPACE = "kube-system"
DEFAULT_IMAGE = f"vmss-terminate:{__version__}"
DEFAULT_PORT = 9102
NAME = "vmss-terminate"
EVENTS_NAMESPACE = "default"
STATE_DIR = "/var/lib/vmss-terminate"
LABELS = {"app.kubernetes.io/name": NAME, "app.kubernetes.io/component": "agent"}
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")

Obj = Dict[str, Any]


def cluster_rules() -> List[Obj]:
    """The ClusterRole's rules: what `agent run --kubernetes` calls, cluster-wide."""
    return [
        {"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]},
        {"apiGroups": [""], "resources": ["pods/eviction"], "verbs": ["create"]},
    ]


def event_rules() -> List[Obj]:
    """The Role's rules in namespace `default`: the drain's Events about the node."""
    return [{"apiGroups": ["events.k8s.io"], "resources": ["events"], "verbs": ["create"]}]


def manifests(namespace: str = DEFAULT_NAMESPACE, image: str = DEFAULT_IMAGE, port: int = DEFAULT_PORT,
              agent_args: Sequence[str] = ()) -> List[Obj]:
    """ServiceAccount, ClusterRole + binding, Role + binding (events), DaemonSet -- in apply order.
    `agent_args` are appended to `agent run --kubernetes ...` (e.g. `--taint KEY=VALUE:EFFECT`)."""
    from vmss_terminate.errors import UsageError

    if not _DNS_LABEL.match(namespace):
        raise UsageError(f"invalid --namespace {namespace!r}: a DNS label (lower-case letters, digits, '-')")
    if not image.strip() or any(c.isspace() for c in image):
        raise UsageError(f"invalid --image {image!r}: an image reference such as myregistry.azurecr.io/vmss-terminate:1.0")
    if not 1 <= port <= 65535:
        raise UsageError(f"invalid --port {port}: 1..65535")
    account = {"kind": "ServiceAccount", "name": NAME, "namespace": namespace}
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": _meta(NAME, namespace)},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": _meta(NAME),
         "rules": cluster_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": _meta(NAME),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": NAME},
         "subjects": [account]},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": _meta(f"{NAME}-events",
                                                                                          EVENTS_NAMESPACE),
         "rules": event_rules()},
        {"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
         "metadata": _meta(f"{NAME}-events", EVENTS_NAMESPACE),
         "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": f"{NAME}-events"},
         "subjects": [account]},
        _daemonset(namespace, image, port, list(agent_args)),
    ]


def host_manifests(namespace: str = DEFAULT_NAMESPACE) -> List[Obj]:
    """For the agent on the host (systemd, kubeadm nodes): the same ServiceAccount and RBAC, no
    DaemonSet, plus a service-account token Secret the host's kubeconfig carries."""
    docs = [doc for doc in manifests(namespace) if doc["kind"] != "DaemonSet"]
    token = _meta(f"{NAME}-token", namespace)
    token["annotations"] = {"kubernetes.io/service-account.name": NAME}
    return docs + [{"apiVersion": "v1", "kind": "Secret", "metadata": token,
                    "type": "kubernetes.io/service-account-token"}]


HOST_HEADER = """\
# vmss-terminate agent on the host (systemd) of kubeadm, k3s or RKE2 nodes: its ServiceAccount, least
# RBAC and a long-lived token for the host's kubeconfig. Generated by the vmss-terminate package
# (iac/kubernetes.py host_manifests); the drop-in kubernetes.conf next to this file runs the agent.
#
# Once per cluster, with cluster-admin credentials:
#   kubectl apply -f host-rbac.yaml
# On each node (or baked into the image), as root; SERVER is the API server URL, e.g. https://10.0.0.4:6443:
#   mkdir -p /etc/vmss-terminate && umask 077
#   kubectl -n kube-system get secret vmss-terminate-token -o jsonpath='{.data.ca\\.crt}' | base64 -d > /etc/vmss-terminate/ca.crt
#   kubectl config --kubeconfig=/etc/vmss-terminate/kubeconfig set-cluster cluster --server="$SERVER" --certificate-authority=/etc/vmss-terminate/ca.crt --embed-certs=true
#   kubectl config --kubeconfig=/etc/vmss-terminate/kubeconfig set-credentials vmss-terminate --token="$(kubectl -n kube-system get secret vmss-terminate-token -o jsonpath='{.data.token}' | base64 -d)"
#   kubectl config --kubeconfig=/etc/vmss-terminate/kubeconfig set-context vmss-terminate --cluster=cluster --user=vmss-terminate
#   kubectl config --kubeconfig=/etc/vmss-terminate/kubeconfig use-context vmss-terminate
"""


def render_host() -> str:
    """`templates/kubernetes/host/host-rbac.yaml`: `HOST_HEADER` and `host_manifests()`."""
    return HOST_HEADER + "".join("---\n" + to_yaml(doc) for doc in host_manifests())


def _meta(name: str, namespace: Optional[str] = None) -> Obj:
    meta: Obj = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(LABELS)
    return meta


def _daemonset(namespace: str, image: str, port: int, agent_args: List[str]) -> Obj:
    probe = {"httpGet": {"path": "/healthz", "port": "http"}, "periodSeconds": 10, "timeoutSeconds": 3,
             "failureThreshold": 6}
    container = {
        "name": "agent",
        "image": image,
        "args": ["agent", "run", "--kubernetes", "--listen", f"[$(POD_IP)]:{port}",
                 "--state-file", f"{STATE_DIR}/state.json", *agent_args],
        "env": [
            {"name": "NODE_NAME", "valueFrom": {"fieldRef": {"fieldPath": "spec.nodeName"}}},
            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        ],
        "ports": [{"name": "http", "containerPort": port, "protocol": "TCP"}],
        "livenessProbe": probe,
        # 503 from a drain's start: the DaemonSet pod leaves Service endpoints while its node drains.
        "readinessProbe": dict(probe, httpGet={"path": "/readyz", "port": "http"}, failureThreshold=1),
        "resources": {"requests": {"cpu": "10m", "memory": "40Mi"}, "limits": {"memory": "96Mi"}},
        "securityContext": {"allowPrivilegeEscalation": False, "readOnlyRootFilesystem": True,
                            "capabilities": {"drop": ["ALL"]}},
        "volumeMounts": [{"name": "state", "mountPath": STATE_DIR}],
    }
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": _meta(NAME, namespace),
        "spec": {
            "selector": {"matchLabels": {"app.kubernetes.io/name": NAME}},
            "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "10%"}},
            "template": {
                "metadata": {
                    "labels": dict(LABELS),
                    "annotations": {"prometheus.io/scrape": "true", "prometheus.io/port": str(port),
                                    "prometheus.io/path": "/metrics"},
                },
                "spec": {
                    "serviceAccountName": NAME,
                    "priorityClassName": "system-node-critical",
                    "hostNetwork": True,
                    "dnsPolicy": "ClusterFirstWithHostNet",
                    "tolerations": [{"operator": "Exists"}],
                    "nodeSelector": {"kubernetes.io/os": "linux"},
                    # hooks get --stop-grace (45 s) to finish on a stop, like the systemd unit's 60 s
                    "terminationGracePeriodSeconds": 60,
                    "securityContext": {"runAsNonRoot": True, "runAsUser": 65532, "runAsGroup": 65532,
                                        "fsGroup": 65532, "seccompProfile": {"type": "RuntimeDefault"}},
                    "containers": [container],
                    "volumes": [{"name": "state", "emptyDir": {}}],
                },
            },
        },
    }


def render_kubernetes(namespace: str = DEFAULT_NAMESPACE, image: str = DEFAULT_IMAGE, port: int = DEFAULT_PORT,
                      agent_args: Sequence[str] = ()) -> str:
    """The manifests as one multi-document YAML stream (`kubectl apply -f -` takes it)."""
    header = ("# vmss-terminate agent on every node: cordon, evict and approve only this VM's Terminate event.\n"
              "# Generated by: vmss-terminate render --format kubernetes (docs/kubernetes.md)\n")
    return header + "".join("---\n" + to_yaml(doc) for doc in manifests(namespace, image, port, agent_args))


# -- a small YAML emitter (block style; the lean install has no YAML library) -----------------------

_PLAIN = re.compile(r"^(?:--?)?[A-Za-z_/$][A-Za-z0-9_./:()$%=-]*$")
_RESERVED = {"true", "false", "yes", "no", "on", "off", "null", "y", "n", "~"}


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, (int, float)):
        return json.dumps(value)
    text = str(value)
    if _PLAIN.match(text) and text.lower() not in _RESERVED and ": " not in text and not text.endswith(":"):
        return text
    return json.dumps(text)  # a JSON string is a valid YAML double-quoted scalar


def to_yaml(value: Any, indent: int = 0) -> str:
    """Block-style YAML for JSON-like data (dicts keep their order)."""
    return "".join(line + "\n" for line in _lines(value, indent))


def _lines(value: Any, indent: int) -> List[str]:
    pad = " " * indent
    if isinstance(value, dict):
        if not value:
            return [pad + "{}"]
        out: List[str] = []
        for key, item in value.items():
            label = f"{pad}{_scalar(key)}:"
            if isinstance(item, (dict, list)) and item:
                out.append(label)
                out.extend(_lines(item, indent + (0 if isinstance(item, list) else 2)))
            else:
                out.append(f"{label} {_inline(item)}")
        return out
    if isinstance(value, list):
        if not value:
            return [pad + "[]"]
        out = []
        for item in value:
            if isinstance(item, (dict, list)) and item:
                nested = _lines(item, indent + 2)
                out.append(f"{pad}- {nested[0].lstrip()}")
                out.extend(nested[1:])
            else:
                out.append(f"{pad}- {_inline(item)}")
        return out
    return [pad + _scalar(value)]


def _inline(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _scalar(value)
