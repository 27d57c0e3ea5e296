"""Label and field selectors, as the API server reads them.

* `labelSelector=` query strings: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`,
  comma-joined (all must hold).
* `LabelSelector` objects in specs (PDB, DaemonSet): `matchLabels` + `matchExpressions`
  (`In`, `NotIn`, `Exists`, `DoesNotExist`). An empty selector matches everything; a missing one
  (None) matches nothing -- the PDB rule.
* `fieldSelector=` query strings: `path=value`, `path==value`, `path!=value`, comma-joined, over the
  labels a kind supports (`Kind.fields` plus metadata.name and metadata.namespace).
"""

from __future__ import annotations

import re
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

Labels = Mapping[str, str]
Matcher = Callable[[Labels], bool]


class SelectorError(ValueError):
    """A selector the API server would refuse (400 BadRequest)."""


_SET_TERM = re.compile(r"^\s*(?P<key>[^\s!=(),]+)\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)\s*$")
_EQ_TERM = re.compile(r"^\s*(?P<key>[^\s!=(),]+)\s*(?P<op>==|=|!=)\s*(?P<value>[^\s!=(),]*)\s*$")
_EXISTS_TERM = re.compile(r"^\s*(?P<neg>!?)\s*(?P<key>[^\s!=(),]+)\s*$")


def _split_terms(text: str) -> List[str]:
    """Split at commas outside parentheses (`a in (x,y),b` is two terms)."""
    terms, depth, start = [], 0, 0
    for index, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            terms.append(text[start:index])
            start = index + 1
    terms.append(text[start:])
    return [term for term in terms if term.strip()]


def parse_label_selector(text: Optional[str]) -> Matcher:
    """A `labelSelector` query value -> a predicate over an object's labels."""
    if not text or not text.strip():
        return lambda labels: True
    checks: List[Matcher] = []
    for term in _split_terms(text):
        checks.append(_label_term(term))
    return lambda labels: all(check(labels) for check in checks)


def _label_term(term: str) -> Matcher:
    match = _SET_TERM.match(term)
    if match:
        key, values = match["key"], {v.strip() for v in match["values"].split(",") if v.strip()}
        if match["op"] == "in":
            return lambda labels: labels.get(key) in values
        return lambda labels: labels.get(key) not in values
    match = _EQ_TERM.match(term)
    if match:
        key, value = match["key"], match["value"]
        if match["op"] == "!=":
            return lambda labels: labels.get(key) != value
        return lambda labels: labels.get(key) == value
    match = _EXISTS_TERM.match(term)
    if match:
        key = match["key"]
        if match["neg"]:
            return lambda labels: key not in labels
        return lambda labels: key in labels
    raise SelectorError(f"unable to parse requirement: {term.strip()!r}")


def label_selector_matcher(selector: Optional[Mapping[str, Any]]) -> Matcher:
    """A `LabelSelector` object -> predicate. None matches nothing, `{}` everything."""
    if selector is None:
        return lambda labels: False
    checks: List[Matcher] = []
    for key, value in (selector.get("matchLabels") or {}).items():
        checks.append(_equals(str(key), str(value)))
    for expression in selector.get("matchExpressions") or []:
        checks.append(_expression(expression))
    return lambda labels: all(check(labels) for check in checks)


def _equals(key: str, value: str) -> Matcher:
    return lambda labels: labels.get(key) == value


def _expression(expression: Mapping[str, Any]) -> Matcher:
    key = str(expression.get("key", ""))
    operator = expression.get("operator")
    values = set(expression.get("values") or [])
    if operator == "In":
        return lambda labels: labels.get(key) in values
    if operator == "NotIn":
        return lambda labels: labels.get(key) not in values
    if operator == "Exists":
        return lambda labels: key in labels
    if operator == "DoesNotExist":
        return lambda labels: key not in labels
    raise SelectorError(f"{operator!r} is not a valid label selector operator")


def parse_field_selector(text: Optional[str], supported: Sequence[str]) -> Callable[[Dict[str, Any]], bool]:
    """A `fieldSelector` query value -> predicate over an object; labels outside `supported`
    (plus metadata.name/metadata.namespace) raise SelectorError, as the API server answers 400."""
    if not text or not text.strip():
        return lambda obj: True
    allowed = set(supported) | {"metadata.name", "metadata.namespace"}
    terms: List[Tuple[str, bool, str]] = []
    for term in text.split(","):
        if not term.strip():
            continue
        for op in ("!=", "==", "="):
            if op in term:
                path, _, value = term.partition(op)
                break
        else:
            raise SelectorError(f"invalid selector: '{text}'; can't understand '{term}'")
        path = path.strip()
        if path not in allowed:
            raise SelectorError(f'field label not supported: {path}')
        terms.append((path, op == "!=", value.strip()))

    def check(obj: Dict[str, Any]) -> bool:
        return all((field_value(obj, path) == value) != negate for path, negate, value in terms)

    return check


_BOOLEAN_FIELDS = frozenset({"spec.unschedulable", "spec.hostNetwork"})  # absent reads as "false"


def field_value(obj: Mapping[str, Any], path: str) -> str:
    """An object's value at a field-selector path, as the API server's field sets spell it
    (absent is "", booleans are "true"/"false")."""
    value: Any = obj
    for part in path.split("."):
        value = value.get(part) if isinstance(value, Mapping) else None
    if value is None:
        return "false" if path in _BOOLEAN_FIELDS else ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, Mapping):  # "source" on core events is source.component
        return str(value.get("component", ""))
    return str(value)
