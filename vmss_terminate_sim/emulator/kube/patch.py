"""The three patch formats the API server accepts, applied to plain JSON objects.

* `application/merge-patch+json` (RFC 7386): objects merge, `null` deletes, everything else replaces.
* `application/strategic-merge-patch+json` (what `kubectl cordon`, `taint` and `label` send): like a
  merge patch, but lists whose field has a *merge key* merge element by element (containers by
  `name`, conditions by `type`, ...), and the directives `$patch: replace|delete|merge`,
  `$retainKeys`, `$setElementOrder/<field>` and `$deleteFromPrimitiveList/<field>` are honoured.
  Lists without a merge key (a node's `spec.taints`, tolerations) are replaced, as the real
  Kubernetes types declare them.
* `application/json-patch+json` (RFC 6902): add, remove, replace, move, copy, test.
"""

from __future__ import annotations

import copy
from typing import Any, Dict, List, Optional

MERGE_PATCH = "application/merge-patch+json"
STRATEGIC_MERGE_PATCH = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"
PATCH_TYPES = (MERGE_PATCH, STRATEGIC_MERGE_PATCH, JSON_PATCH)  # server-side apply (apply-patch+yaml) is not served

# field name -> merge key, for the lists of the kinds served here (Kubernetes' patchMergeKey tags)
MERGE_KEYS: Dict[str, str] = {
    "containers": "name", "initContainers": "name", "ephemeralContainers": "name",
    "volumes": "name", "volumeMounts": "mountPath", "env": "name", "ports": "containerPort",
    "conditions": "type", "ownerReferences": "uid", "imagePullSecrets": "name",
    "addresses": "type", "hostAliases": "ip", "containerStatuses": "name",
    "initContainerStatuses": "name", "podIPs": "ip", "readinessGates": "conditionType",
}
# lists of scalars merged as sets (patchStrategy merge without a key)
MERGED_SCALAR_LISTS = frozenset({"finalizers"})


class PatchError(ValueError):
    """A patch that cannot be applied (the API server's 422 / 400)."""


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def strategic_merge_patch(target: Any, patch: Any) -> Any:
    """Kubernetes' strategic merge patch over plain JSON (the merge keys above)."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    directive = patch.get("$patch")
    if directive == "replace":
        return {k: copy.deepcopy(v) for k, v in patch.items() if k != "$patch"}
    if directive == "delete":
        return None
    result = dict(target) if isinstance(target, dict) else {}
    retain = patch.get("$retainKeys")
    for key, value in patch.items():
        if key in ("$patch", "$retainKeys") or key.startswith("$setElementOrder/"):
            continue
        if key.startswith("$deleteFromPrimitiveList/"):
            field = key.split("/", 1)[1]
            result[field] = [item for item in result.get(field) or [] if item not in (value or [])]
            continue
        if value is None:
            result.pop(key, None)
        elif isinstance(value, list):
            result[key] = _merge_list(key, result.get(key), value)
        else:
            merged = strategic_merge_patch(result.get(key), value)
            if merged is None:
                result.pop(key, None)
            else:
                result[key] = merged
    if isinstance(retain, list):
        result = {k: v for k, v in result.items() if k in retain}
    return result


def _merge_list(field: str, current: Any, patch: List[Any]) -> List[Any]:
    if field in MERGED_SCALAR_LISTS:
        merged = list(current or [])
        return merged + [item for item in patch if item not in merged]
    key = MERGE_KEYS.get(field)
    if key is None or not isinstance(current, list):
        return [_strip_directives(item) for item in patch
                if not (isinstance(item, dict) and item.get("$patch") == "delete")]
    if any(isinstance(item, dict) and item.get("$patch") == "replace" for item in patch):
        return [_strip_directives(item) for item in patch
                if not (isinstance(item, dict) and item.get("$patch") == "replace")]
    merged = [copy.deepcopy(item) for item in current]
    for item in patch:
        if not isinstance(item, dict) or key not in item:
            raise PatchError(f"map: {item!r} does not contain declared merge key: {key}")
        index = next((i for i, old in enumerate(merged) if isinstance(old, dict) and old.get(key) == item[key]), None)
        if item.get("$patch") == "delete":
            if index is not None:
                merged.pop(index)
        elif index is None:
            merged.append(_strip_directives(item))
        else:
            merged[index] = strategic_merge_patch(merged[index], item)
    return merged


def _strip_directives(item: Any) -> Any:
    if isinstance(item, dict):
        return {k: _strip_directives(v) for k, v in item.items() if not k.startswith("$")}
    return copy.deepcopy(item)


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902; raises PatchError for a malformed operation or a failed `test`."""
    if not isinstance(operations, list):
        raise PatchError("a JSON patch is a list of operations")
    document = copy.deepcopy(target)
    for operation in operations:
        if not isinstance(operation, dict) or "op" not in operation or "path" not in operation:
            raise PatchError(f"invalid JSON patch operation: {operation!r}")
        op, path = operation["op"], _pointer(operation["path"])
        if op == "add":
            document = _add(document, path, copy.deepcopy(operation.get("value")))
        elif op == "remove":
            document = _remove(document, path)
        elif op == "replace":
            document = _add(_remove(document, path), path, copy.deepcopy(operation.get("value")))
        elif op in ("move", "copy"):
            source = _pointer(str(operation.get("from", "")))
            value = copy.deepcopy(_get(document, source))
            if op == "move":
                document = _remove(document, source)
            document = _add(document, path, value)
        elif op == "test":
            if _get(document, path) != operation.get("value"):
                raise PatchError(f"testing value {operation['path']} failed")
        else:
            raise PatchError(f"unknown JSON patch operation {op!r}")
    return document


def _pointer(text: str) -> List[str]:
    if text == "":
        return []
    if not text.startswith("/"):
        raise PatchError(f"invalid JSON pointer {text!r}")
    return [part.replace("~1", "/").replace("~0", "~") for part in text[1:].split("/")]


def _parent(document: Any, path: List[str]) -> Any:
    node = document
    for part in path[:-1]:
        node = _step(node, part)
    return node


def _step(node: Any, part: str) -> Any:
    if isinstance(node, dict) and part in node:
        return node[part]
    if isinstance(node, list) and part.isdigit() and int(part) < len(node):
        return node[int(part)]
    raise PatchError(f"path segment {part!r} does not exist")


def _get(document: Any, path: List[str]) -> Any:
    node = document
    for part in path:
        node = _step(node, part)
    return node


def _add(document: Any, path: List[str], value: Any) -> Any:
    if not path:
        return value
    parent, last = _parent(document, path), path[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        index = len(parent) if last == "-" else _index(last, len(parent) + 1)
        parent.insert(index, value)
    else:
        raise PatchError(f"cannot add at {'/'.join(path)}")
    return document


def _remove(document: Any, path: List[str]) -> Any:
    if not path:
        return None
    parent, last = _parent(document, path), path[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list):
        parent.pop(_index(last, len(parent)))
    else:
        raise PatchError(f"path {'/'.join(path)} does not exist")
    return document


def _index(text: str, size: int) -> int:
    if not text.isdigit() or int(text) >= size:
        raise PatchError(f"index {text!r} out of range")
    return int(text)


def apply_patch(content_type: Optional[str], target: Dict[str, Any], patch: Any) -> Any:
    """Apply `patch` in the format `content_type` names; unknown formats raise LookupError (415)."""
    media = (content_type or "").split(";")[0].strip().lower()
    if media == MERGE_PATCH:
        return merge_patch(target, patch)
    if media == STRATEGIC_MERGE_PATCH:
        return strategic_merge_patch(target, patch)
    if media == JSON_PATCH:
        return json_patch(target, patch)
    raise LookupError(media)
