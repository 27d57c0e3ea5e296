"""Discovery documents (`/api`, `/apis`, `/api/v1`, `/apis/{group}/{version}`, `/version`), built from
the `kinds.KINDS` table, in the legacy (unaggregated) format.

client-go asks for aggregated discovery (`Accept: application/json;g=apidiscovery.k8s.io;v=v2;
as=APIGroupDiscoveryList, ..., application/json`) and falls back to the legacy documents when the
answer's Content-Type is plain `application/json`, which is what the emulator always sends. kubectl
finds the Eviction subresource here: `pods/eviction` with group `policy`, version `v1`.
"""

from __future__ import annotations

import hashlib
from typing import Any, Dict, List, Optional

from vmss_terminate_sim.emulator.kube.kinds import GROUPS, kinds_of

SERVER_VERSION = {"major": "1", "minor": "32", "emulationMajor": "1", "emulationMinor": "32",
                  "gitVersion": "v1.32.0", "gitCommit": "0000000000000000000000000000000000000000",
                  "gitTreeState": "clean", "buildDate": "2024-12-11T00:00:00Z", "goVersion": "go1.23.3",
                  "compiler": "gc", "platform": "linux/amd64"}


def api_versions(server_address: str) -> Dict[str, Any]:
    return {"kind": "APIVersions", "versions": list(GROUPS[""]),
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}]}


def _group(name: str) -> Dict[str, Any]:
    versions = [{"groupVersion": f"{name}/{v}", "version": v} for v in GROUPS[name]]
    return {"name": name, "versions": versions, "preferredVersion": versions[0]}


def api_group_list() -> Dict[str, Any]:
    return {"kind": "APIGroupList", "apiVersion": "v1", "groups": [_group(g) for g in GROUPS if g]}


def api_group(name: str) -> Optional[Dict[str, Any]]:
    if not name or name not in GROUPS:
        return None
    return {"kind": "APIGroup", "apiVersion": "v1", **_group(name)}


def resource_list(group: str, version: str) -> Optional[Dict[str, Any]]:
    kinds = kinds_of(group, version)
    if not kinds:
        return None
    resources: List[Dict[str, Any]] = []
    for kind in kinds:
        entry: Dict[str, Any] = {"name": kind.plural, "singularName": kind.singular, "namespaced": kind.namespaced,
                                 "kind": kind.kind, "verbs": list(kind.verbs)}
        if kind.short_names:
            entry["shortNames"] = list(kind.short_names)
        if kind.categories:
            entry["categories"] = list(kind.categories)
        entry["storageVersionHash"] = hashlib.sha256(kind.api_version.encode() + kind.plural.encode()).hexdigest()[:11]
        resources.append(entry)
        for sub in kind.subresources:
            item: Dict[str, Any] = {"name": f"{kind.plural}/{sub.name}", "singularName": "",
                                    "namespaced": kind.namespaced}
            if sub.group or sub.version:
                item["group"], item["version"] = sub.group, sub.version
            item["kind"], item["verbs"] = sub.kind, list(sub.verbs)
            resources.append(item)
    group_version = f"{group}/{version}" if group else version
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": group_version, "resources": resources}
