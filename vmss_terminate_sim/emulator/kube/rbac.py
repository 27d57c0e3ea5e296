"""RBAC for service-account tokens, as the API server's RBAC authorizer decides: a request is
allowed when a rule of a Role or ClusterRole bound to the account (ClusterRoleBinding: everywhere;
RoleBinding: in its namespace) names its API group, resource (`pods/eviction` for a subresource),
verb and, when the rule has `resourceNames`, the object. Otherwise 403 Forbidden with the API
server's message. The emulator's own token is cluster-admin; discovery and health paths are open
to every authenticated user (system:discovery).

This is what lets a test prove that the templates' RBAC is enough for the agent, and no more.
"""

from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Sequence, Tuple

Obj = Dict[str, Any]
Account = Tuple[str, str]  # (namespace, name) of a ServiceAccount


def username(account: Account) -> str:
    return f"system:serviceaccount:{account[0]}:{account[1]}"


def _bound(subjects: Sequence[Obj], account: Account) -> bool:
    groups = {"system:authenticated", "system:serviceaccounts", f"system:serviceaccounts:{account[0]}"}
    for subject in subjects or []:
        kind = subject.get("kind")
        if kind == "ServiceAccount" and (subject.get("namespace"), subject.get("name")) == account:
            return True
        if kind == "User" and subject.get("name") == username(account):
            return True
        if kind == "Group" and subject.get("name") in groups:
            return True
    return False


def rules_for(account: Account, cluster_bindings: Sequence[Obj], bindings: Sequence[Obj],
              cluster_roles: Dict[str, Obj], roles: Dict[Tuple[str, str], Obj]) -> Iterator[Tuple[Optional[str], Obj]]:
    """(namespace the rule applies in -- None: everywhere, rule) for every rule bound to `account`."""
    for binding in cluster_bindings:
        if _bound(binding.get("subjects") or [], account):
            role = cluster_roles.get((binding.get("roleRef") or {}).get("name", ""))
            for rule in (role or {}).get("rules") or []:
                yield None, rule
    for binding in bindings:
        if not _bound(binding.get("subjects") or [], account):
            continue
        namespace = binding["metadata"]["namespace"]
        ref = binding.get("roleRef") or {}
        role = cluster_roles.get(ref.get("name", "")) if ref.get("kind") == "ClusterRole" else \
            roles.get((namespace, ref.get("name", "")))
        for rule in (role or {}).get("rules") or []:
            yield namespace, rule


def allows(rule: Obj, verb: str, group: str, resource: str, name: Optional[str]) -> bool:
    def has(field: str, value: str) -> bool:
        values: List[str] = rule.get(field) or []
        return "*" in values or value in values

    if not (has("verbs", verb) and has("apiGroups", group) and has("resources", resource)):
        return False
    names = rule.get("resourceNames") or []
    return not names or (name is not None and name in names)


def forbidden_message(account: Account, verb: str, group: str, resource: str, namespace: str,
                      name: Optional[str]) -> str:
    base = resource.split("/")[0]
    target = f'{base}{"." + group if group else ""}'
    subject = f'{target} "{name}"' if name else target
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    return (f'{subject} is forbidden: User "{username(account)}" cannot {verb} resource "{resource}" '
            f'in API group "{group}" {where}')
