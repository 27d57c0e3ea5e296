"""`KubeState`: the cluster the Kubernetes emulator serves -- objects, resource versions, the pod
life cycle after an eviction, and what tests read back. No HTTP here (see `app.py`).

What it models beyond storing objects:

* every write bumps one cluster-wide `resourceVersion`; objects get a `uid` and a
  `creationTimestamp` on create; `generateName` gets a 5-character suffix;
* a pod deleted or evicted gets `deletionTimestamp` + `deletionGracePeriodSeconds` (the delete
  options' grace period, else the pod's `terminationGracePeriodSeconds`, default 30) and is
  *removed* once the injectable clock passes that; every read looks at the clock first (`tick`);
* controllers, just enough for drains to finish: a pod owned by a ReplicaSet or
  ReplicationController is replaced as soon as it is terminating (those controllers count only
  active pods: `IsPodActive` is false once a pod has a `deletionTimestamp`), a StatefulSet pod once
  it is removed, under the same name with a new uid; the replacement goes to a node that can take
  it (schedulable, no NoSchedule/NoExecute taint the pod does not tolerate; Pending without a node
  when none can) and is Ready `pod_start_seconds` later (image pull, container start, readiness
  probe: until then a budget still counts one pod short). A removed DaemonSet pod comes back on the
  same node. Off with `KubeState(replace_pods=False)`;
* deleting a node removes its pods (the pod garbage collector, without its delay);
* the Eviction subresource with PodDisruptionBudget arithmetic (`disruption.py`): 429 while a budget
  allows no disruption, 500 when several budgets select the pod; each attempt lands in `evictions`.
"""

from __future__ import annotations

import base64
import collections
import copy
import hmac
import random
import secrets
import threading
import time
import uuid
from dataclasses import dataclass
from typing import Any, Callable, Deque, Dict, Iterator, List, Optional, Sequence, Set, Tuple

from vmss_terminate.clock import SYSTEM_CLOCK, Clock, wait_until
from vmss_terminate_sim.emulator.kube import disruption, events, objects, rbac, validation
from vmss_terminate_sim.emulator.kube.kinds import (
    CLUSTER_ROLE_BINDINGS,
    CLUSTER_ROLES,
    DAEMON_SETS,
    DEPLOYMENTS,
    EVENTS,
    KINDS,
    NAMESPACES,
    NEW_EVENTS,
    NODES,
    PDBS,
    PODS,
    REPLICA_SETS,
    ROLE_BINDINGS,
    ROLES,
    SECRETS,
    SERVICE_ACCOUNTS,
    STATEFUL_SETS,
    Kind,
    kind_named,
)
from vmss_terminate_sim.emulator.kube.objects import rfc3339
from vmss_terminate_sim.emulator.kube.patch import PatchError, apply_patch
from vmss_terminate_sim.emulator.kube.status import (
    ApiError,
    already_exists,
    bad_request,
    conflict,
    invalid,
    not_found,
    unsupported_media_type,
)

Obj = Dict[str, Any]
DEFAULT_NAMESPACES = ("default", "kube-system", "kube-public", "kube-node-lease")
SA_TOKEN_TYPE = "kubernetes.io/service-account-token"
CHANGES_KEPT = 10_000  # changes a watch can resume from; older resource versions are 410 Expired
_SUFFIX = "bcdfghjklmnpqrstvwxz2456789"  # the API server's generateName alphabet
_REPLACED_BY = {"ReplicaSet", "ReplicationController", "StatefulSet", "DaemonSet"}
_REPLACED_WHEN_TERMINATING = {"ReplicaSet", "ReplicationController"}  # controller.FilterActivePods
POD_START_SECONDS = 5.0
"""Clock seconds from a replacement pod's creation to its Ready condition (the emulator's stand-in for
image pull, container start and the first readiness probe). A PodDisruptionBudget counts the pod it
replaces as disrupted until then, so evictions under a budget go one start-up apart, as they do on
a real cluster -- not one grace period apart (the old pod's termination is not waited for)."""
_SCALED = {"ReplicaSet": REPLICA_SETS, "StatefulSet": STATEFUL_SETS, "Deployment": DEPLOYMENTS}


@dataclass(frozen=True)
class EvictionRecord:
    """One eviction attempt as the API server answered it."""

    namespace: str
    name: str
    uid: str
    code: int             # 200 allowed, 429 budget, 404 no such pod, 500 several budgets
    at: float             # clock time
    budget: Optional[str] = None  # the PDB that decided, if any


@dataclass(frozen=True)
class Removal:
    """A pod that left the API (its grace period passed, or its node was deleted)."""

    namespace: str
    name: str
    uid: str
    node: str
    at: float


class KubeState:
    """Objects by kind, namespace and name, behind one lock; `changed` is notified on every write."""

    def __init__(self, clock: Clock = SYSTEM_CLOCK, replace_pods: bool = True,
                 pod_start_seconds: float = POD_START_SECONDS) -> None:
        self.clock = clock
        self.replace_pods = replace_pods
        self.pod_start_seconds = pod_start_seconds
        self.ca_pem: Optional[bytes] = None  # the serving CA, for service-account-token Secrets' ca.crt
        self.evictions: List[EvictionRecord] = []
        self.removals: List[Removal] = []
        self._objects: Dict[Tuple[str, str], Dict[Tuple[str, str], Obj]] = {kind.key: {} for kind in KINDS}
        # a NEW_EVENTS object is stored in core v1 shape (events.py) under EVENTS' key
        self._removal_at: Dict[str, float] = {}  # pod uid -> clock time it leaves
        self._ready_at: Dict[str, float] = {}  # starting replacement pod uid -> clock time it turns Ready
        self._replaced: Set[str] = set()  # uids of terminating pods whose controller already replaced them
        # PDB uid -> (DisruptionAllowed status, its lastTransitionTime): the time moves only on a flip
        self._pdb_transitions: Dict[str, Tuple[str, str]] = {}
        self._version = 1000
        self._changes: Deque[Tuple[int, str, Tuple[str, str], Obj]] = collections.deque(maxlen=CHANGES_KEPT)
        self._lock = threading.RLock()
        self.changed = threading.Condition(self._lock)
        self._random = random.Random()
        for name in DEFAULT_NAMESPACES:
            self.create(NAMESPACES, "", {"metadata": {"name": name}})

    # -- reading ---------------------------------------------------------------------------

    @property
    def resource_version(self) -> str:
        with self._lock:
            return str(self._version)

    def get(self, kind: Kind, namespace: str, name: str) -> Obj:
        with self._lock:
            self.tick()
            obj = self._objects[kind.key].get((namespace if kind.namespaced else "", name))
            if obj is None:
                raise not_found(kind.plural, name, kind.group)
            return self._view(kind, obj)

    def find(self, kind: Kind, namespace: str, name: str) -> Optional[Obj]:
        """Like `get`, None when absent (for tests and the sandbox)."""
        try:
            return self.get(kind, namespace, name)
        except ApiError:
            return None

    def list(self, kind: Kind, namespace: Optional[str] = None,
             where: Callable[[Obj], bool] = lambda obj: True) -> List[Obj]:
        """Objects of `kind` (in `namespace`, or all), sorted by namespace and name, as served."""
        with self._lock:
            self.tick()
            items = [obj for (ns, _), obj in sorted(self._objects[kind.key].items())
                     if namespace is None or ns == namespace]
            return [view for view in (self._view(kind, obj) for obj in items) if where(view)]

    def pods_on(self, node: str) -> List[Obj]:
        return self.list(PODS, where=lambda pod: (pod.get("spec") or {}).get("nodeName") == node)

    def _view(self, kind: Kind, obj: Obj) -> Obj:
        """A copy as served: apiVersion/kind, and computed status where Kubernetes' controllers keep it."""
        view = events.to_new(obj) if kind is NEW_EVENTS else copy.deepcopy(obj)
        view["apiVersion"], view["kind"] = kind.api_version, kind.kind
        if kind is PDBS:
            view["status"] = self._budget(obj).status(
                int(obj["metadata"].get("generation", 1)), self._terminating(obj))
            self._stamp_transition(obj, view["status"]["conditions"][0])
        elif kind is DAEMON_SETS:
            count = sum(1 for pod in self._owned(obj, "DaemonSet"))
            view["status"] = {"currentNumberScheduled": count, "desiredNumberScheduled": count,
                              "numberAvailable": count, "numberReady": count, "numberMisscheduled": 0,
                              "observedGeneration": obj["metadata"].get("generation", 1),
                              "updatedNumberScheduled": count}
        return _reorder(view)

    def _owned(self, owner: Obj, kind_name: str) -> Iterator[Obj]:
        namespace, name = owner["metadata"].get("namespace"), owner["metadata"]["name"]
        for pod in self._objects[PODS.key].values():
            ref = disruption.controller_of(pod)
            if pod["metadata"].get("namespace") == namespace and ref and ref.get("kind") == kind_name \
                    and ref.get("name") == name:
                yield pod

    # -- writing ---------------------------------------------------------------------------

    def _bump(self) -> str:
        self._version += 1
        self.changed.notify_all()
        return str(self._version)

    def _log(self, key: Tuple[str, str], change: str, obj: Obj) -> str:
        """A write: the next resource version, stamped on `obj`, and the change kept for watches."""
        version = self._bump()
        obj["metadata"]["resourceVersion"] = version
        self._changes.append((int(version), change, key, copy.deepcopy(obj)))
        return version

    def watch(self, kind: Kind, namespace: Optional[str], since: Optional[str], where: Callable[[Obj], bool],
              wait: float, over: Callable[[], bool] = lambda: False) -> Tuple[List[Tuple[str, Obj]], str]:
        """The changes a watch from resourceVersion `since` sees: ("ADDED"|"MODIFIED"|"DELETED", object)
        after it, waiting up to `wait` real seconds for the first (less once `over()`: the watch's
        time is up); with no `since` (or "0"), the current objects as ADDED. Returns them and the
        resource version they bring the client to. Raises ApiError 410 Expired when `since` is older
        than the changes kept."""
        with self._lock:
            self.tick()
            if not since or since == "0":
                return [("ADDED", view) for view in self.list(kind, namespace, where)], self.resource_version
            try:
                start = int(since)
            except ValueError:
                raise bad_request(f"invalid resourceVersion {since!r}") from None
            if len(self._changes) == self._changes.maxlen and start < self._changes[0][0] - 1:
                raise ApiError(410, "Expired", f"too old resource version: {start} ({self._changes[0][0] - 1})")
            deadline = time.monotonic() + wait
            while True:
                found = []
                for version, change, key, obj in self._changes:
                    if version <= start or key != kind.key:
                        continue
                    if namespace is not None and obj["metadata"].get("namespace", "") != namespace:
                        continue
                    view = self._view(kind, obj)
                    if where(view):
                        found.append((change, view))
                remaining = deadline - time.monotonic()
                if found or remaining <= 0 or over():
                    return found, self.resource_version
                self.changed.wait(min(remaining, 0.2))  # and look at the clock again: pods leave on it
                self.tick()

    def create(self, kind: Kind, namespace: str, body: Obj, dry_run: bool = False) -> Obj:
        with self._lock:
            self.tick()
            obj = copy.deepcopy(body)
            metadata = obj.setdefault("metadata", {})
            if not isinstance(metadata, dict):
                raise bad_request("metadata must be an object")
            if kind.namespaced:
                given = metadata.get("namespace")
                if given and given != namespace:
                    raise bad_request("the namespace of the provided object does not match the namespace sent "
                                      "on the request")
                if ("", namespace) not in self._objects[NAMESPACES.key]:
                    raise not_found("namespaces", namespace)
                metadata["namespace"] = namespace
            else:
                metadata.pop("namespace", None)
            if not metadata.get("name"):
                prefix = metadata.get("generateName")
                if not prefix:
                    raise invalid(kind.kind, "", [{"field": "metadata.name", "reason": "FieldValueRequired",
                                                   "message": "Required value: name or generateName is required"}],
                                  kind.group)
                metadata["name"] = prefix + "".join(self._random.choice(_SUFFIX) for _ in range(5))
            key = (namespace if kind.namespaced else "", metadata["name"])
            if key in self._objects[kind.key]:
                raise already_exists(kind.plural, metadata["name"], kind.group)
            validation.validate(kind, obj)
            metadata["uid"] = str(uuid.uuid4())
            metadata["creationTimestamp"] = rfc3339(self.clock.now())
            if kind not in (PODS, NODES, NAMESPACES, EVENTS, NEW_EVENTS):
                metadata.setdefault("generation", 1)
            metadata.pop("resourceVersion", None)
            metadata.pop("deletionTimestamp", None)
            validation.defaults(kind, obj)
            if kind is SECRETS and obj.get("type") == SA_TOKEN_TYPE:
                self._fill_token(obj)
            if kind is NEW_EVENTS:
                obj = events.to_core(obj)
            if dry_run:
                obj["metadata"]["resourceVersion"] = ""
                return self._view(kind, obj)
            self._objects[kind.key][key] = obj
            self._log(kind.key, "ADDED", obj)
            return self._view(kind, obj)

    def replace(self, kind: Kind, namespace: str, name: str, body: Obj, dry_run: bool = False,
                subresource: Optional[str] = None) -> Obj:
        """PUT: optimistic concurrency on `metadata.resourceVersion` when the body carries one."""
        with self._lock:
            current = self._stored(kind, namespace, name)
            sent = (body.get("metadata") or {}).get("resourceVersion")
            if sent and sent != current["metadata"]["resourceVersion"]:
                raise conflict(kind.plural, name, "the object has been modified; please apply your changes to "
                               "the latest version and try again", kind.group)
            if (body.get("metadata") or {}).get("name", name) != name:
                raise bad_request("the name of the object does not match the name on the URL")
            return self._store_update(kind, current, copy.deepcopy(body), dry_run, subresource)

    def patch(self, kind: Kind, namespace: str, name: str, content_type: Optional[str], patch: Any,
              dry_run: bool = False, subresource: Optional[str] = None) -> Obj:
        with self._lock:
            current = self._stored(kind, namespace, name)
            try:
                patched = apply_patch(content_type, self._view(kind, current), patch)
            except LookupError as exc:
                raise unsupported_media_type(str(exc)) from None
            except PatchError as exc:
                raise ApiError(422, "Invalid", str(exc)) from None
            if not isinstance(patched, dict):
                raise bad_request("the patch does not produce an object")
            sent = (patched.get("metadata") or {}).get("resourceVersion")
            if sent and sent != current["metadata"]["resourceVersion"]:
                raise conflict(kind.plural, name, "the object has been modified; please apply your changes to "
                               "the latest version and try again", kind.group)
            return self._store_update(kind, current, patched, dry_run, subresource)

    def _stored(self, kind: Kind, namespace: str, name: str) -> Obj:
        self.tick()
        obj = self._objects[kind.key].get((namespace if kind.namespaced else "", name))
        if obj is None:
            raise not_found(kind.plural, name, kind.group)
        return obj

    def _store_update(self, kind: Kind, current: Obj, new: Obj, dry_run: bool, subresource: Optional[str]) -> Obj:
        """The main resource never changes status, the status subresource only status; identity
        fields stay (name, namespace, uid, creationTimestamp, deletion marks)."""
        new.pop("apiVersion", None)
        new.pop("kind", None)
        if subresource == "status":
            merged = copy.deepcopy(current)
            merged["status"] = new.get("status", {})
            new = merged
        elif "status" in current or "status" in new:
            new["status"] = copy.deepcopy(current.get("status", {}))
            if kind in (PDBS, DAEMON_SETS):
                new.pop("status", None)
        metadata = new.setdefault("metadata", {})
        for field in ("name", "namespace", "uid", "creationTimestamp", "deletionTimestamp",
                      "deletionGracePeriodSeconds", "generation"):
            if field in current["metadata"]:
                metadata[field] = current["metadata"][field]
            else:
                metadata.pop(field, None)
        validation.validate(kind, new)
        if "generation" in metadata and subresource != "status" and new.get("spec") != current.get("spec"):
            metadata["generation"] = int(metadata["generation"]) + 1
        if kind is NEW_EVENTS:
            new = events.to_core(new)
            metadata = new["metadata"]
        if dry_run:
            return self._view(kind, new)
        key = (metadata.get("namespace", ""), metadata["name"])
        self._objects[kind.key][key] = new
        self._log(kind.key, "MODIFIED", new)
        return self._view(kind, new)

    def delete(self, kind: Kind, namespace: str, name: str, grace: Optional[int] = None,
               preconditions: Optional[Dict[str, Any]] = None, dry_run: bool = False) -> Obj:
        """DELETE: a pod is marked terminating and leaves after its grace period; anything else goes now."""
        with self._lock:
            current = self._stored(kind, namespace, name)
            validation.check_preconditions(kind, current, preconditions)
            if dry_run:
                return self._view(kind, current)
            if kind is PODS:
                return self._terminate(current, grace)
            del self._objects[kind.key][(namespace if kind.namespaced else "", name)]
            self._log(kind.key, "DELETED", current)
            if kind is NODES:
                for pod in list(self._objects[PODS.key].values()):
                    if (pod.get("spec") or {}).get("nodeName") == name:
                        self._remove_pod(pod)
            if kind is NAMESPACES:
                for other in KINDS:
                    if other.namespaced:
                        for key in [k for k in self._objects[other.key] if k[0] == name]:
                            self._log(other.key, "DELETED", self._objects[other.key].pop(key))
            return self._view(kind, current)

    def _terminate(self, pod: Obj, grace: Optional[int]) -> Obj:
        metadata = pod["metadata"]
        if grace is None or grace < 0:
            grace = int((pod.get("spec") or {}).get("terminationGracePeriodSeconds", validation.DEFAULT_GRACE))
        now = self.clock.now()
        leaves = now + grace
        first = not metadata.get("deletionTimestamp")
        if not first:  # a second delete may only shorten the wait
            leaves = min(leaves, self._removal_at.get(metadata["uid"], leaves))
        else:
            metadata["deletionTimestamp"] = rfc3339(leaves)
        metadata["deletionGracePeriodSeconds"] = max(0, int(round(leaves - now)))
        self._removal_at[metadata["uid"]] = leaves
        self._log(PODS.key, "MODIFIED", pod)
        view = self._view(PODS, pod)
        ref = disruption.controller_of(pod)
        if first and self.replace_pods and ref is not None and ref.get("kind") in _REPLACED_WHEN_TERMINATING:
            self._replaced.add(metadata["uid"])
            self._replace(pod)
        self.tick()
        return view

    # -- the clock -------------------------------------------------------------------------

    def tick(self) -> None:
        """Remove the pods whose grace period has passed (and replace them), mark the replacements whose
        start-up time has passed Ready; every read calls it."""
        with self._lock:
            now = self.clock.now()
            if self._ready_at:
                started = [pod for pod in self._objects[PODS.key].values()
                           if self._ready_at.get(pod["metadata"]["uid"], now + 1) <= now]
                for pod in started:
                    objects.mark_ready(pod["status"], self._ready_at.pop(pod["metadata"]["uid"]))
                    self._log(PODS.key, "MODIFIED", pod)
            due = [pod for pod in self._objects[PODS.key].values()
                   if pod["metadata"]["uid"] in self._removal_at and self._removal_at[pod["metadata"]["uid"]] <= now]
            for pod in due:
                self._remove_pod(pod)

    def _remove_pod(self, pod: Obj) -> None:
        metadata = pod["metadata"]
        key = (metadata["namespace"], metadata["name"])
        if self._objects[PODS.key].get(key) is not pod:
            return
        del self._objects[PODS.key][key]
        self._removal_at.pop(metadata["uid"], None)
        self._ready_at.pop(metadata["uid"], None)
        node = (pod.get("spec") or {}).get("nodeName", "")
        self.removals.append(Removal(metadata["namespace"], metadata["name"], metadata["uid"], node,
                                     self.clock.now()))
        self._log(PODS.key, "DELETED", pod)
        replaced = metadata["uid"] in self._replaced
        self._replaced.discard(metadata["uid"])
        if self.replace_pods and not replaced:
            self._replace(pod)

    def _replace(self, gone: Obj) -> None:
        ref = disruption.controller_of(gone)
        if ref is None or ref.get("kind") not in _REPLACED_BY:
            return
        pod = copy.deepcopy(gone)
        metadata = pod["metadata"]
        for field in ("uid", "resourceVersion", "creationTimestamp", "deletionTimestamp",
                      "deletionGracePeriodSeconds"):
            metadata.pop(field, None)
        spec = pod.setdefault("spec", {})
        node = spec.get("nodeName", "")
        if ref["kind"] == "DaemonSet":
            if ("", node) not in self._objects[NODES.key]:
                return
            metadata["name"] = ""
            metadata["generateName"] = f"{ref['name']}-"
        else:
            if ref["kind"] != "StatefulSet":
                metadata["name"] = ""
                metadata["generateName"] = metadata.get("generateName") or f"{ref['name']}-"
            target = self._schedulable_node(pod)
            if target is None:
                spec.pop("nodeName", None)
                pod["status"] = {"phase": "Pending", "conditions": [
                    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable"}]}
            else:
                spec["nodeName"] = target
                pod["status"] = self._starting()
        if ref["kind"] == "DaemonSet":
            pod["status"] = self._starting()
        created = self.create(PODS, metadata["namespace"], pod)
        if pod["status"].get("phase") == "Running" and not disruption.is_ready(pod):
            self._ready_at[created["metadata"]["uid"]] = self.clock.now() + self.pod_start_seconds

    def _starting(self) -> Obj:
        """A replacement's status: Running, Ready only once `pod_start_seconds` have passed (`tick`)."""
        return objects.running_status(self.clock.now(), ready=self.pod_start_seconds <= 0)

    def _schedulable_node(self, pod: Obj) -> Optional[str]:
        """The first node by name that can take `pod` (the emulator's whole scheduler)."""
        for (_, name), node in sorted(self._objects[NODES.key].items()):
            if objects.schedulable(node, pod):
                return name
        return None

    # -- service-account tokens (the token controller) ------------------------------------

    def _fill_token(self, secret: Obj) -> None:
        """A `kubernetes.io/service-account-token` Secret naming an existing ServiceAccount gets
        `data.token`, `data.ca.crt` and `data.namespace`, as the token controller fills it; the
        token then authenticates (see `token_is_valid`)."""
        metadata = secret["metadata"]
        account = (metadata.get("annotations") or {}).get("kubernetes.io/service-account.name")
        if not account or (metadata["namespace"], account) not in self._objects[SERVICE_ACCOUNTS.key]:
            return
        def b64(text: bytes) -> str:
            return base64.b64encode(text).decode("ascii")
        secret["data"] = {"ca.crt": b64(self.ca_pem or b""), "namespace": b64(metadata["namespace"].encode()),
                          "token": b64(secrets.token_urlsafe(32).encode())}

    def account_of(self, token: str) -> Optional[rbac.Account]:
        """The ServiceAccount whose service-account-token Secret holds `token` (while it exists)."""
        with self._lock:
            for (namespace, _), secret in self._objects[SECRETS.key].items():
                if secret.get("type") != SA_TOKEN_TYPE:
                    continue
                stored = base64.b64decode((secret.get("data") or {}).get("token", "")).decode("ascii", "replace")
                account = (secret["metadata"].get("annotations") or {}).get("kubernetes.io/service-account.name")
                if stored and hmac.compare_digest(stored, token) and \
                        (namespace, account) in self._objects[SERVICE_ACCOUNTS.key]:
                    return namespace, str(account)
            return None

    def authorize(self, account: rbac.Account, verb: str, kind: Kind, resource: str, namespace: str,
                  name: Optional[str]) -> None:
        """RBAC (`rbac.py`) for a service account's request; raises ApiError 403 Forbidden."""
        with self._lock:
            objects_of = self._objects
            rules = rbac.rules_for(
                account, list(objects_of[CLUSTER_ROLE_BINDINGS.key].values()),
                list(objects_of[ROLE_BINDINGS.key].values()),
                {name_: obj for (_, name_), obj in objects_of[CLUSTER_ROLES.key].items()},
                dict(objects_of[ROLES.key]))
            for scope, rule in rules:
                if (scope is None or scope == namespace) and rbac.allows(rule, verb, kind.group, resource, name):
                    return
        message = rbac.forbidden_message(account, verb, kind.group, resource, namespace, name)
        details: Obj = {"name": name} if name else {}
        if kind.group:
            details["group"] = kind.group
        details["kind"] = kind.plural
        raise ApiError(403, "Forbidden", message, details)

    # -- eviction --------------------------------------------------------------------------

    def evict(self, namespace: str, name: str, eviction: Obj, dry_run: bool = False) -> None:
        """The Eviction subresource: raises ApiError (404, 409, 429, 500) or marks the pod terminating."""
        with self._lock:
            try:
                pod = self._stored(PODS, namespace, name)
            except ApiError:
                self._record(namespace, name, "", 404)
                raise
            options = eviction.get("deleteOptions") or {}
            validation.check_preconditions(PODS, pod, options.get("preconditions"))
            grace = options.get("gracePeriodSeconds")
            phase = (pod.get("status") or {}).get("phase")
            decided_by: Optional[str] = None
            if not pod["metadata"].get("deletionTimestamp") and phase not in ("Succeeded", "Failed", "Pending"):
                budgets = [pdb for pdb in self._objects[PDBS.key].values() if disruption.selects(pdb, pod)]
                if len(budgets) > 1:
                    self._record(namespace, name, pod["metadata"]["uid"], 500)
                    raise ApiError(500, "InternalError",
                                   "Internal error occurred: This pod has more than one PodDisruptionBudget, which "
                                   "the eviction subresource does not support.",
                                   {"causes": [{"message": "This pod has more than one PodDisruptionBudget, which "
                                                "the eviction subresource does not support."}]})
                if budgets:
                    pdb = budgets[0]
                    decided_by = pdb["metadata"]["name"]
                    self._check_budget(pdb, pod)
            self._record(namespace, name, pod["metadata"]["uid"], 200, decided_by)
            if not dry_run:
                self._terminate(pod, None if grace is None else int(grace))

    def _check_budget(self, pdb: Obj, pod: Obj) -> None:
        budget = self._budget(pdb)
        healthy = disruption.is_healthy(pod)
        if not healthy:
            policy = (pdb.get("spec") or {}).get("unhealthyPodEvictionPolicy", "IfHealthyBudget")
            # eviction.go: the IfHealthyBudget shortcut also needs desiredHealthy > 0; with 0 desired the
            # request falls through to the normal check, where disruptionsAllowed == 0 answers 429
            if policy == "AlwaysAllow" or (budget.current >= budget.desired and budget.desired > 0):
                return
        elif budget.allowed > 0:
            return
        self._record(pod["metadata"]["namespace"], pod["metadata"]["name"], pod["metadata"]["uid"], 429,
                     pdb["metadata"]["name"])
        raise ApiError(429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                       {"causes": [{"reason": "DisruptionBudget",
                                    "message": f"The disruption budget {pdb['metadata']['name']} needs "
                                               f"{budget.desired} healthy pods and has {budget.current} currently"}]})

    def _record(self, namespace: str, name: str, uid: str, code: int, budget: Optional[str] = None) -> None:
        self.evictions.append(EvictionRecord(namespace, name, uid, code, self.clock.now(), budget))
        self.changed.notify_all()

    def _stamp_transition(self, pdb: Obj, condition: Obj) -> None:
        """Set the condition's required `lastTransitionTime`: when its status last flipped (first seen
        at a read: the emulator computes PDB status on demand, as the disruption controller would)."""
        with self._lock:
            uid = pdb["metadata"]["uid"]
            known = self._pdb_transitions.get(uid)
            if known is None or known[0] != condition["status"]:
                known = (condition["status"], rfc3339(self.clock.now()))
                self._pdb_transitions[uid] = known
                live = {obj["metadata"]["uid"] for obj in self._objects[PDBS.key].values()}
                if len(self._pdb_transitions) > 2 * len(live) + 16:  # forget deleted budgets
                    self._pdb_transitions = {k: v for k, v in self._pdb_transitions.items() if k in live}
            condition["lastTransitionTime"] = known[1]

    def _budget(self, pdb: Obj) -> disruption.Budget:
        pods = [pod for pod in self._objects[PODS.key].values()
                if pod["metadata"].get("namespace") == pdb["metadata"].get("namespace")]
        return disruption.budget(pdb, pods, self._scale_of)

    def _terminating(self, pdb: Obj) -> Dict[str, str]:
        return {pod["metadata"]["name"]: pod["metadata"]["deletionTimestamp"]
                for pod in self._objects[PODS.key].values()
                if pod["metadata"].get("deletionTimestamp") and disruption.selects(pdb, pod)}

    def _scale_of(self, namespace: str, kind_name: str, name: str) -> Optional[int]:
        kind = _SCALED.get(kind_name)
        owner = self._objects[kind.key].get((namespace, name)) if kind else None
        if owner is None:
            return None
        return int((owner.get("spec") or {}).get("replicas", 1))

    # -- conveniences for tests, seeds and the sandbox ---------------------------------------

    def add_node(self, name: str, *, provider_id: Optional[str] = None, labels: Optional[Dict[str, str]] = None,
                 unschedulable: bool = False, taints: Sequence[Obj] = (), ready: bool = True) -> Obj:
        """A Ready node (`provider_id`: `azure:///subscriptions/.../virtualMachines/<id>`)."""
        return self.create(NODES, "", objects.node(name, self.clock.now(), provider_id, labels, unschedulable,
                                                   taints, ready))

    def add_pod(self, name: str, node: Optional[str], *, namespace: str = "default", owner: Optional[str] = None,
                **shape: Any) -> Obj:
        """`owner` is `KIND/NAME` (`ReplicaSet/web-7d9f`, `DaemonSet/agent`); `shape`: the fields of
        `objects.PodShape` (`labels`, `grace`, `ready`, `phase`, `tolerations`; `mirror` makes a
        static pod's mirror, owned by the Node; `empty_dir` adds an emptyDir volume)."""
        spec = objects.PodShape(**shape)
        with self._lock:
            self.ensure_namespace(namespace)
            reference = None
            if owner:
                kind_name, _, owner_name = owner.partition("/")
                reference = self._owner_ref(namespace, kind_name, owner_name)
            if spec.mirror and ("", node or "") in self._objects[NODES.key]:
                reference = objects.owner_reference("Node", str(node),
                                                    self._objects[NODES.key][("", str(node))]["metadata"]["uid"])
            body = objects.pod(name, node, self.clock.now(), reference, spec)
            return self.create(PODS, namespace, body)

    def add_pdb(self, name: str, *, namespace: str = "default", selector: Optional[Dict[str, str]] = None,
                min_available: Any = None, max_unavailable: Any = None) -> Obj:
        """A PodDisruptionBudget over `selector` (matchLabels): `min_available` or `max_unavailable`, N or "P%"."""
        self.ensure_namespace(namespace)
        return self.create(PDBS, namespace, objects.pdb(name, selector, min_available, max_unavailable))

    def add_daemonset(self, name: str, *, namespace: str = "default", labels: Optional[Dict[str, str]] = None) -> Obj:
        self.ensure_namespace(namespace)
        return self.create(DAEMON_SETS, namespace, objects.workload(name, labels or {"app": name}))

    def add_replicaset(self, name: str, replicas: int, *, namespace: str = "default",
                       labels: Optional[Dict[str, str]] = None) -> Obj:
        """A ReplicaSet whose `replicas` is the scale percentage and maxUnavailable budgets count."""
        self.ensure_namespace(namespace)
        return self.create(REPLICA_SETS, namespace, objects.workload(name, labels or {"app": name}, replicas))

    def ensure_namespace(self, name: str) -> None:
        with self._lock:
            if ("", name) not in self._objects[NAMESPACES.key]:
                self.create(NAMESPACES, "", {"metadata": {"name": name}})

    def add_object(self, obj: Obj) -> Obj:
        """Any object with `apiVersion` and `kind` (what `kubectl get -o json` prints)."""
        kind = kind_named(str(obj.get("apiVersion", "")), str(obj.get("kind", "")))
        if kind is None:
            raise ValueError(f"the emulator does not serve {obj.get('apiVersion')} {obj.get('kind')}")
        namespace = (obj.get("metadata") or {}).get("namespace") or "default"
        if kind.namespaced:
            self.ensure_namespace(namespace)
        return self.create(kind, namespace if kind.namespaced else "", obj)

    def events(self) -> List[Obj]:
        """Every event, in events.k8s.io/v1 shape (`list(EVENTS)` gives the core v1 shape)."""
        return self.list(NEW_EVENTS)

    def wait_for(self, check: Callable[["KubeState"], bool], timeout: float) -> bool:
        """Block until `check(state)` holds (re-checked on every change and tick) or `timeout` real seconds."""
        def ready() -> bool:
            self.tick()
            return check(self)

        return wait_until(self.changed, ready, timeout)

    def _owner_ref(self, namespace: str, kind_name: str, name: str) -> Obj:
        """A controller reference; the uid of the owner when the emulator holds it, else a stable one."""
        kind = {"DaemonSet": DAEMON_SETS, "ReplicaSet": REPLICA_SETS, "StatefulSet": STATEFUL_SETS,
                "Deployment": DEPLOYMENTS}.get(kind_name)
        owner = self._objects[kind.key].get((namespace, name)) if kind else None
        uid = owner["metadata"]["uid"] if owner else str(uuid.uuid5(uuid.NAMESPACE_URL, f"{namespace}/{kind_name}/{name}"))
        return objects.owner_reference(kind_name, name, uid)


_ORDER = ("apiVersion", "kind", "metadata", "spec", "status")


def _reorder(obj: Obj) -> Obj:
    """Keys in the API server's order (apiVersion, kind, metadata, spec, status, then the rest)."""
    ordered = {key: obj[key] for key in _ORDER if key in obj}
    ordered.update({key: value for key, value in obj.items() if key not in ordered})
    return ordered
