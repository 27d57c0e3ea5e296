"""Command-line options declared once, as dataclass field metadata (stdlib only, no click).

An options object (`AgentConfig`, `fleet.RolloutOptions`, `control.UpgradeOptions`, ...) is a dataclass; each field that is
also an option is declared with `option(default, help=...)`: its name, default and type are the
field's, its flag is the field name with dashes (`safety_margin` -> `--safety-margin`) unless
`flags=` says otherwise. `options_of(cls)` reads them back as `Option` records, from which
`commands/fields.py` builds the click options and `agent/command.py` parses `agent run` without
click, so a default or a help text is written in exactly one place.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from typing import Any, Callable, Mapping, NamedTuple, Optional, Tuple

from vmss_terminate.errors import InvalidValue, UsageError

_KEY = "vmss_terminate.option"

#: How an option's value is read: text, float, flag (no value: sets the opposite of the default),
#: switch (`--x/--no-x`: True, False, or the default None when neither is given), choice (one of
#: `choices`), file (a path that is not a directory), or parsed (by `parse`, a library function
#: whose UsageError is the message).
KINDS = ("text", "float", "flag", "switch", "choice", "file", "parsed")


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
           parse: Optional[Callable[[Any], Any]] = None) -> Any:
    """A dataclass field that is also a command-line option (see the module docstring). The kind
    is inferred when not given: a bool default is a flag, `choices` a choice, `parse` parsed, a
    float default a float, anything else text. More metadata of the field's own (e.g. bounds):
    `with_metadata(option(...), ...)`."""
    if kind is None:
        kind = ("flag" if isinstance(default, bool) else "choice" if choices else "parsed" if parse
                else "float" if isinstance(default, float) else "text")
    if kind not in KINDS:
        raise ValueError(f"unknown option kind {kind!r}")
    spec = {"flags": flags, "kind": kind, "help": help, "metavar": metavar, "multiple": multiple,
            "choices": tuple(choices), "show_default": show_default, "required": required, "parse": parse}
    return dataclasses.field(default=default, metadata={_KEY: spec})


def with_metadata(field: Any, metadata: Mapping[str, Any]) -> Any:
    """`field` (a declared option, or any dataclass field with a plain default) with more metadata."""
    return dataclasses.field(default=field.default, metadata={**field.metadata, **metadata})


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


# Numbers a user types: ASCII digits only (Python's int() and float() also take full-width and
# other Unicode digits, surrounding spaces, `nan`, `inf` and `1_000`), an optional `-`, at most one
# `.`, and a bounded length (int() of 5,000 digits raises "Exceeds the limit"). A decimal may carry
# an exponent (`1e2`, `2.5E-1`: a valid float, as click's FLOAT reads it); its result must be finite.
_WHOLE = re.compile(r"-?[0-9]{1,18}", re.ASCII)
_DECIMAL = re.compile(r"-?(?:[0-9]{1,15}(?:\.[0-9]{0,15})?|\.[0-9]{1,15})(?:[eE][-+]?[0-9]{1,3})?", re.ASCII)


def shown(value: Any, limit: int = 40) -> str:
    """`value` quoted for a one-line message, cut after `limit` characters (a 5,000-digit number
    is said in a few words, not repeated)."""
    text = str(value)
    return repr(text) if len(text) <= limit else repr(text[:limit]) + f"... ({len(text)} characters)"


def strict_whole(value: Any) -> Optional[int]:
    """`value` as a whole number typed in ASCII digits (an int passes as it is), else None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    text = str(value)
    return int(text) if _WHOLE.fullmatch(text) else None


def strict_decimal(value: Any) -> Optional[float]:
    """`value` as a finite decimal number typed in ASCII (`10`, `0.5`, `-1`, `1e2`; an int or float
    passes if finite), else None: no `nan`, `inf`, `1e400`, underscore, Unicode digit or space."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if math.isfinite(value) else None
    text = str(value)
    if not _DECIMAL.fullmatch(text):
        return None
    number = float(text)
    return number if math.isfinite(number) else None


_NON_FINITE = ("nan", "inf", "+inf", "-inf", "infinity", "+infinity", "-infinity")


def strict_float(value: Any) -> Optional[float]:
    """`strict_decimal`, plus the words `nan` and `inf`, which a library check refuses in its own
    words (`invalid --poll-interval nan: expected a number of seconds`): for options whose range
    the library checks; None for anything else (full-width digits, spaces, `1e3`, 5,000 digits)."""
    number = strict_decimal(value)
    if number is None and isinstance(value, str) and value.lower() in _NON_FINITE:
        return float(value)
    return number


def number_range(name: str, low: Optional[float] = None, high: Optional[float] = None, *,
                 what: str = "a number of seconds") -> Callable[[Any], float]:
    """A parser for a decimal number in low..high (None: unbounded there; the library may check):
    `invalid --wait-timeout 'nan': a number of seconds >= 0` (the option and the value said once)."""
    bounds = ("" if low is None and high is None else f" >= {low:g}" if high is None
              else f" <= {high:g}" if low is None else f" from {low:g} to {high:g}")

    def parse(value: Any) -> float:
        number = strict_decimal(value)
        if number is None or (low is not None and number < low) or (high is not None and number > high):
            raise InvalidValue(name.replace("-", "_"), value, f"{what}{bounds}", option="--" + name)
        return number

    return parse


def file_path(flag: str, value: Any) -> str:
    """A `file` option's value, as both parsers read it: any path but a directory's (the library
    reads the file later and says what is wrong with it): `invalid --kubeconfig '/etc': a directory,
    not a file`. One message, whichever parser read the command line."""
    text = str(value)
    if os.path.isdir(text):
        raise UsageError(f"invalid {flag} {text!r}: a directory, not a file")  # the whole path, never cut
    return text


def whole_number(name: str, low: Optional[int] = None, high: Optional[int] = None) -> Callable[[Any], int]:
    """A parser for a whole number in low..high: `invalid --concurrency 'x': a whole number from 1 to
    256` (the option and the value said once). No bounds: the library checks the range itself."""
    bounds = "" if low is None or high is None else f" from {low} to {high}"

    def parse(value: Any) -> int:
        number = strict_whole(value)
        if number is None or (bounds and not low <= number <= high):  # type: ignore[operator]
            raise InvalidValue(name.replace("-", "_"), value, f"a whole number{bounds}", option="--" + name)
        return number

    return parse
