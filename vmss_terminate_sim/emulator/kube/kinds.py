"""The resource types the Kubernetes emulator serves: one `Kind` line each, the single table that
discovery, routing, lists and field selectors all read.

A kind says where it lives (group, version, plural), whether it is namespaced, which verbs and
subresources discovery advertises, and which field labels its lists accept (`spec.nodeName` for
pods, as the real API server allows; any other label is a 400, as there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, Optional, Tuple

ALL = ("create", "delete", "get", "list", "patch", "update", "watch")  # no deletecollection: not served


@dataclass(frozen=True)
class Subresource:
    """A subresource as discovery lists it (`pods/eviction` is policy/v1 Eviction)."""

    name: str
    kind: str
    verbs: Tuple[str, ...]
    group: str = ""
    version: str = ""


@dataclass(frozen=True)
class Kind:
    group: str                     # "" for the core (legacy) group
    version: str
    plural: str
    kind: str
    namespaced: bool
    verbs: Tuple[str, ...] = ALL
    short_names: Tuple[str, ...] = ()
    categories: Tuple[str, ...] = ()
    fields: Tuple[str, ...] = ()   # field-selector labels beyond metadata.name / metadata.namespace
    subresources: Tuple[Subresource, ...] = ()
    stored_as: Optional[Tuple[str, str]] = None  # the (group, plural) whose storage it shares

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def singular(self) -> str:
        return self.kind.lower()

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def key(self) -> Tuple[str, str]:
        """Storage key: one resource served in two groups (events) shares one."""
        return self.stored_as or (self.group, self.plural)


_POD_FIELDS = ("spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName",
               "spec.hostNetwork", "status.phase", "status.podIP", "status.nominatedNodeName")
_EVENT_FIELDS = ("involvedObject.kind", "involvedObject.namespace", "involvedObject.name",
                 "involvedObject.uid", "involvedObject.apiVersion", "involvedObject.resourceVersion",
                 "involvedObject.fieldPath", "reason", "reportingComponent", "source", "type")
_NEW_EVENT_FIELDS = ("regarding.kind", "regarding.namespace", "regarding.name", "regarding.uid",
                     "regarding.apiVersion", "reason", "reportingController", "type")

NODES = Kind("", "v1", "nodes", "Node", False, short_names=("no",), fields=("spec.unschedulable",),
             subresources=(Subresource("status", "Node", ("get", "patch", "update")),))
PODS = Kind("", "v1", "pods", "Pod", True, short_names=("po",), categories=("all",), fields=_POD_FIELDS,
            subresources=(Subresource("eviction", "Eviction", ("create",), "policy", "v1"),
                          Subresource("status", "Pod", ("get", "patch", "update"))))
NAMESPACES = Kind("", "v1", "namespaces", "Namespace", False,
                  short_names=("ns",), fields=("status.phase",))
EVENTS = Kind("", "v1", "events", "Event", True, short_names=("ev",), fields=_EVENT_FIELDS)
SERVICE_ACCOUNTS = Kind("", "v1", "serviceaccounts", "ServiceAccount", True, short_names=("sa",))
CONFIG_MAPS = Kind("", "v1", "configmaps", "ConfigMap", True, short_names=("cm",))
SECRETS = Kind("", "v1", "secrets", "Secret", True, fields=("type",))
NEW_EVENTS = Kind("events.k8s.io", "v1", "events", "Event", True, short_names=("ev",), fields=_NEW_EVENT_FIELDS,
                  stored_as=("", "events"))
PDBS = Kind("policy", "v1", "poddisruptionbudgets", "PodDisruptionBudget", True, short_names=("pdb",),
            subresources=(Subresource("status", "PodDisruptionBudget", ("get", "patch", "update")),))
DAEMON_SETS = Kind("apps", "v1", "daemonsets", "DaemonSet", True, short_names=("ds",), categories=("all",),
                   subresources=(Subresource("status", "DaemonSet", ("get", "patch", "update")),))
REPLICA_SETS = Kind("apps", "v1", "replicasets", "ReplicaSet", True, short_names=("rs",), categories=("all",))
DEPLOYMENTS = Kind("apps", "v1", "deployments", "Deployment", True, short_names=("deploy",), categories=("all",))
STATEFUL_SETS = Kind("apps", "v1", "statefulsets", "StatefulSet", True, short_names=("sts",), categories=("all",))
CLUSTER_ROLES = Kind("rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", False)
CLUSTER_ROLE_BINDINGS = Kind("rbac.authorization.k8s.io", "v1", "clusterrolebindings", "ClusterRoleBinding", False)
ROLES = Kind("rbac.authorization.k8s.io", "v1", "roles", "Role", True)
ROLE_BINDINGS = Kind("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", True)

KINDS: Tuple[Kind, ...] = (
    NODES, PODS, NAMESPACES, EVENTS, SERVICE_ACCOUNTS, CONFIG_MAPS, SECRETS, NEW_EVENTS, PDBS,
    DAEMON_SETS, REPLICA_SETS, DEPLOYMENTS, STATEFUL_SETS,
    CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS, ROLES, ROLE_BINDINGS,
)

# group -> versions served, in discovery order ("" is the legacy core group under /api)
GROUPS: Dict[str, Tuple[str, ...]] = {}
for _kind in KINDS:
    GROUPS.setdefault(_kind.group, ())
    if _kind.version not in GROUPS[_kind.group]:
        GROUPS[_kind.group] += (_kind.version,)


def kinds_of(group: str, version: str) -> Tuple[Kind, ...]:
    return tuple(k for k in KINDS if k.group == group and k.version == version)


def find_kind(group: str, version: str, plural: str) -> Optional[Kind]:
    for kind in KINDS:
        if kind.group == group and kind.version == version and kind.plural == plural:
            return kind
    return None


def kind_named(api_version: str, kind_name: str) -> Optional[Kind]:
    """The kind an object's `apiVersion` + `kind` name (seed files, request bodies)."""
    group, _, version = api_version.rpartition("/")
    for kind in KINDS:
        if kind.group == group and kind.version == version and kind.kind == kind_name:
            return kind
    return None
