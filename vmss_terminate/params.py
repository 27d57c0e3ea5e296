"""Command-line options declared once, as dataclass field metadata (stdlib only, no click).

An options object (`AgentConfig`, `fleet.RolloutOptions`, ...) is a dataclass; each field that is
also an option is declared with `option(default, help=...)`: its name, default and type are the
field's, its flag is the field name with dashes (`safety_margin` -> `--safety-margin`) unless
`flags=` says otherwise. `options_of(cls)` reads them back as `Option` records, from which
`commands/options.py` builds the click options and `agent/command.py` parses `agent run` without
click, so a default or a help text is written in exactly one place.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping, NamedTuple, Optional, Tuple

from vmss_terminate.errors import InvalidValue

_KEY = "vmss_terminate.option"

#: How an option's value is read: text, float, flag (no value: sets the opposite of the default),
#: choice (one of `choices`), file (a path that is not a directory), or parsed (by `parse`, a
#: library function whose UsageError is the message).
KINDS = ("text", "float", "flag", "choice", "file", "parsed")


class Option(NamedTuple):
    """One option as both parsers read it: its flags, the field it fills, and how to read its value."""

    flags: Tuple[str, ...]
    dest: str
    kind: str = "text"
    default: Any = None
    help: str = ""
    metavar: Optional[str] = None
    multiple: bool = False
    choices: Tuple[str, ...] = ()
    show_default: bool = False
    required: bool = False
    parse: Optional[Callable[[Any], Any]] = None

    @property
    def flag(self) -> str:
        """The long flag, as messages name the option."""
        return max(self.flags, key=len)


def option(default: Any = None, *, help: str, flags: Tuple[str, ...] = (), kind: Optional[str] = None,
           metavar: Optional[str] = None, multiple: bool = False, choices: Tuple[str, ...] = (),
           show_default: bool = False, required: bool = False,
           parse: Optional[Callable[[Any], Any]] = None, metadata: Optional[Mapping[str, Any]] = None) -> Any:
    """A dataclass field that is also a command-line option (see the module docstring). The kind
    is inferred when not given: a bool default is a flag, `choices` a choice, `parse` parsed, a
    float default a float, anything else text. `metadata`: more of the field's own (e.g. bounds)."""
    if kind is None:
        kind = ("flag" if isinstance(default, bool) else "choice" if choices else "parsed" if parse
                else "float" if isinstance(default, float) else "text")
    if kind not in KINDS:
        raise ValueError(f"unknown option kind {kind!r}")
    spec = {"flags": flags, "kind": kind, "help": help, "metavar": metavar, "multiple": multiple,
            "choices": tuple(choices), "show_default": show_default, "required": required, "parse": parse}
    return dataclasses.field(default=default, metadata={**(metadata or {}), _KEY: spec})


def options_of(cls: Any) -> Tuple[Option, ...]:
    """The options a dataclass declares, in field order (fields without `option()` are not options)."""
    found = []
    for field in dataclasses.fields(cls):
        spec = field.metadata.get(_KEY)
        if spec is None:
            continue
        flags = spec["flags"] or ("--" + field.name.replace("_", "-"),)
        default = None if field.default is dataclasses.MISSING else field.default
        if default == () and not spec["multiple"]:
            default = None  # an empty collection given as one value: "not given" (the field copes with None)
        found.append(Option(flags=flags, dest=field.name, kind=spec["kind"], default=default, help=spec["help"],
                            metavar=spec["metavar"], multiple=spec["multiple"], choices=spec["choices"],
                            show_default=spec["show_default"], required=spec["required"], parse=spec["parse"]))
    return tuple(found)


def whole_number(name: str, low: int, high: int) -> Callable[[Any], int]:
    """A parser for a whole number in low..high: `invalid --concurrency 'x': a whole number from 1 to
    256` (the option and the value said once)."""

    def parse(value: Any) -> int:
        try:
            number = value if isinstance(value, int) and not isinstance(value, bool) else int(str(value).strip())
        except ValueError:
            number = None
        if number is None or not low <= number <= high:
            raise InvalidValue(name.replace("-", "_"), value, f"a whole number from {low} to {high}",
                               option="--" + name)
        return number

    return parse
