"""A small evaluator for the ARM template expression language, enough for our templates.

Why: no ARM engine installs from PyPI, and checking that a template *contains* the right text is
weaker than computing what Azure would compute. This follows the documented grammar
(https://learn.microsoft.com/azure/azure-resource-manager/templates/template-expressions):
`[func(args)]`, string literals in single quotes with '' as the escape, integers, true/false,
`.property` and `[index]` access. Functions we do not implement raise, so a template that starts
using one fails loudly instead of being half-checked.
"""

from __future__ import annotations

import base64
import json
import re
from typing import Any, Callable, Dict, List, Optional, Tuple

_TOKEN = re.compile(r"\s*(?:(?P<str>'(?:[^']|'')*')|(?P<num>-?\d+)|(?P<name>[A-Za-z_][A-Za-z0-9_]*)|(?P<sym>[(),.\[\]]))")


class ArmError(Exception):
    """The template would fail to deploy (bad parameter value, unknown name, bad expression)."""


class Deployment:
    """Parameter values bound to a template, as ARM does at deployment time."""

    def __init__(self, template: Dict[str, Any], values: Dict[str, Any],
                 resource_group: Optional[Dict[str, Any]] = None) -> None:
        self.template = template
        self.resource_group = resource_group or {"name": "rg", "location": "westeurope"}
        self.params = self._bind(values)
        self._variables: Dict[str, Any] = {}

    def _bind(self, values: Dict[str, Any]) -> Dict[str, Any]:
        declared = self.template.get("parameters", {})
        unknown = set(values) - set(declared)
        if unknown:
            raise ArmError(f"unknown parameters {sorted(unknown)}")
        bound: Dict[str, Any] = {}
        for name, spec in declared.items():
            if name in values:
                value = values[name]
            elif "defaultValue" in spec:
                value = self.value(spec["defaultValue"])
            else:
                raise ArmError(f"missing parameter {name}")
            _check_parameter(name, spec, value)
            bound[name] = value
        return bound

    def value(self, node: Any) -> Any:
        """Evaluate a template node: expressions in strings, recursively in objects and arrays."""
        if isinstance(node, dict):
            return {k: self.value(v) for k, v in node.items()}
        if isinstance(node, list):
            return [self.value(v) for v in node]
        if isinstance(node, str) and node.startswith("[") and node.endswith("]") and not node.startswith("[["):
            return self.expression(node[1:-1])
        return node

    def variable(self, name: str) -> Any:
        if name not in self._variables:
            variables = self.template.get("variables", {})
            if name not in variables:
                raise ArmError(f"unknown variable {name}")
            self._variables[name] = self.value(variables[name])
        return self._variables[name]

    def expression(self, text: str) -> Any:
        tokens = _tokenize(text)
        node, rest = _parse(tokens)
        if rest:
            raise ArmError(f"trailing tokens in expression: {rest!r}")
        return self._eval(node)

    # -- evaluation of the parsed tree ------------------------------------------------------------
    def _eval(self, node: Tuple[Any, ...]) -> Any:
        kind = node[0]
        if kind == "lit":
            return node[1]
        if kind == "prop":
            target = self._eval(node[1])
            return target[node[2]]
        if kind == "index":
            return self._eval(node[1])[self._eval(node[2])]
        name, args = node[1].lower(), node[2]
        if name == "if":  # lazy, like ARM
            return self._eval(args[1]) if self._eval(args[0]) else self._eval(args[2])
        fn = self._functions().get(name)
        if fn is None:
            raise ArmError(f"function {node[1]}() is not implemented by this evaluator")
        return fn(*[self._eval(a) for a in args])

    def _functions(self) -> Dict[str, Callable[..., Any]]:
        return {
            "parameters": lambda n: self.params[n],
            "variables": self.variable,
            "concat": _concat,
            "string": _string,
            "replace": lambda s, old, new: s.replace(old, new),
            "format": lambda fmt, *a: re.sub(r"\{(\d+)\}", lambda m: _string(a[int(m.group(1))]), fmt),
            "empty": lambda v: v is None or len(v) == 0,
            "equals": lambda a, b: a == b,
            "json": json.loads,
            "base64": lambda s: base64.b64encode(s.encode("utf-8")).decode("ascii"),
            "take": lambda v, n: v[: max(n, 0)],
            "resourcegroup": lambda: self.resource_group,
            "resourceid": lambda *parts: "/" + "/".join(parts),
        }


def _check_parameter(name: str, spec: Dict[str, Any], value: Any) -> None:
    kind = spec["type"].lower()
    python_type = {"int": int, "string": str, "securestring": str, "bool": bool, "object": dict, "array": list}[kind]
    if not isinstance(value, python_type) or (kind == "int" and isinstance(value, bool)):
        raise ArmError(f"{name}: expected {kind}, got {value!r}")
    if "minValue" in spec and value < spec["minValue"]:
        raise ArmError(f"{name}: {value} is less than minValue {spec['minValue']}")
    if "maxValue" in spec and value > spec["maxValue"]:
        raise ArmError(f"{name}: {value} is more than maxValue {spec['maxValue']}")
    if "allowedValues" in spec and value not in spec["allowedValues"]:
        raise ArmError(f"{name}: {value!r} is not one of {spec['allowedValues']}")
    if "minLength" in spec and len(value) < spec["minLength"]:
        raise ArmError(f"{name}: shorter than minLength {spec['minLength']}")
    if "maxLength" in spec and len(value) > spec["maxLength"]:
        raise ArmError(f"{name}: longer than maxLength {spec['maxLength']}")


def _string(value: Any) -> str:
    if isinstance(value, bool):
        return "True" if value else "False"  # ARM's string(true) is "True"
    if isinstance(value, (dict, list)):
        return json.dumps(value, separators=(",", ":"))
    return str(value)


def _concat(*values: Any) -> Any:
    if values and all(isinstance(v, list) for v in values):
        return [item for v in values for item in v]
    return "".join(_string(v) for v in values)


def _tokenize(text: str) -> List[Tuple[str, Any]]:
    tokens: List[Tuple[str, Any]] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        match = _TOKEN.match(text, pos)
        if not match:
            raise ArmError(f"cannot tokenize expression at {text[pos:]!r}")
        pos = match.end()
        if match.group("str") is not None:
            tokens.append(("lit", match.group("str")[1:-1].replace("''", "'")))
        elif match.group("num") is not None:
            tokens.append(("lit", int(match.group("num"))))
        elif match.group("name") is not None:
            name = match.group("name")
            tokens.append(("lit", name == "true") if name in ("true", "false") else ("name", name))
        else:
            tokens.append(("sym", match.group("sym")))
    return tokens


def _parse(tokens: List[Tuple[str, Any]]) -> Tuple[Tuple[Any, ...], List[Tuple[str, Any]]]:
    if not tokens:
        raise ArmError("unexpected end of expression")
    head, rest = tokens[0], tokens[1:]
    if head[0] == "lit":
        node: Tuple[Any, ...] = ("lit", head[1])
    elif head[0] == "name":
        if not rest or rest[0] != ("sym", "("):
            raise ArmError(f"expected ( after {head[1]}")
        rest = rest[1:]
        args = []
        if rest and rest[0] == ("sym", ")"):
            rest = rest[1:]
        else:
            while True:
                arg, rest = _parse(rest)
                args.append(arg)
                if rest and rest[0] == ("sym", ","):
                    rest = rest[1:]
                    continue
                if rest and rest[0] == ("sym", ")"):
                    rest = rest[1:]
                    break
                raise ArmError(f"expected , or ) in call of {head[1]}")
        node = ("call", head[1], args)
    else:
        raise ArmError(f"unexpected {head[1]!r}")
    while rest and rest[0] in (("sym", "."), ("sym", "[")):
        if rest[0] == ("sym", "."):
            if len(rest) < 2 or rest[1][0] != "name":
                raise ArmError("expected a property name after .")
            node, rest = ("prop", node, rest[1][1]), rest[2:]
        else:
            index, rest = _parse(rest[1:])
            if not rest or rest[0] != ("sym", "]"):
                raise ArmError("expected ]")
            node, rest = ("index", node, index), rest[1:]
    return node, rest
