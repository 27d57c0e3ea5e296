"""Click options generated from options declared as dataclass fields (`vmss_terminate/params.py`).

`declared_options(Cls, "name")` adds every option `Cls` declares to a command, in field order, and
hands the command one argument, `name=Cls(**their values)`: the defaults, help and types are the
fields', written once, and the command never picks values out of `**kw`. Imports only click and
the declarations, so the agent's commands stay as light as they were.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, Mapping, Optional, Sequence, Tuple, Type

import click

from vmss_terminate.errors import InvalidValue, UsageError, VmssTerminateError
from vmss_terminate.params import Option, file_path, options_of, shown, strict_float

Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


class ParsedType(click.ParamType):
    """A click type over one of the library's parsers: the parser's own error becomes one usage
    line (exit 2), so the CLI and the Python API refuse the same input alike. An `InvalidValue` is
    said once, with the option's name (`invalid --batch-size '-1': ...`), not wrapped in click's
    "Invalid value for '--batch-size':" prefix."""

    def __init__(self, name: str, parse: Callable[[Any], Any], errors: Tuple[Type[Exception], ...] = (UsageError,),
                 message: Callable[[Any, Exception], str] = lambda value, exc: str(exc)) -> None:
        self.name, self._parse, self._errors, self._message = name, parse, errors, message

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        try:
            return self._parse(value)
        except InvalidValue as exc:
            option = max(param.opts, key=len) if param is not None and param.opts else exc.option
            raise click.UsageError(f"invalid {option} {exc.shown}: {exc.reason}", ctx) from None
        except VmssTerminateError as exc:
            raise click.UsageError(exc.cli_message or str(exc), ctx) from None
        except self._errors as exc:
            self.fail(self._message(value, exc), param, ctx)


def click_option(option: Option) -> Decorator:
    """The click form of one declared option."""
    if option.kind == "flag":  # sets the opposite of the field's default
        return click.option(*option.flags, option.dest, is_flag=True, flag_value=not option.default,
                            default=option.default, help=option.help)
    if option.kind == "switch":  # --x/--no-x; neither: the field's default (None: leave it alone)
        return click.option(f"{option.flag}/--no-{option.flag[2:]}", option.dest, default=option.default,
                            help=option.help)
    kind: Any = None
    if option.kind == "float":  # ASCII digits, bounded length: as the click-free parser
        kind = ParsedType(option.flag.lstrip("-"), _decimal, errors=(ValueError,),
                          message=lambda value, exc: f"{shown(value)} is not a valid float.")
    elif option.kind == "choice":
        kind = click.Choice(list(option.choices))
    elif option.kind == "file":
        kind = ParsedType(option.flag.lstrip("-"), functools.partial(file_path, option.flag))
    elif option.kind == "parsed" and option.parse is not None:
        kind = ParsedType(option.flag.lstrip("-"), option.parse)
    return click.option(*option.flags, option.dest, type=kind, default=option.default, help=option.help,
                        metavar=option.metavar, multiple=option.multiple, show_default=option.show_default,
                        required=option.required)


def apply_options(fn: Callable[..., Any], options: Sequence[Decorator]) -> Callable[..., Any]:
    """`fn` with click `options` added in the order given (as `--help` lists them)."""
    for option in reversed(options):
        fn = option(fn)
    return fn


def grouped(options: Sequence[Decorator], keys: Sequence[str], name: str,
            build: Callable[..., Any]) -> Decorator:
    """A decorator adding `options` to a command whose callback receives one argument, `name` =
    `build(**their values)`, instead of each option's value (`keys`: the options' parameter names)."""

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def callback(**kw: Any) -> Any:
            kw[name] = build(**{key: kw.pop(key) for key in keys})
            return fn(**kw)

        return apply_options(callback, options)

    return decorate


def click_options(options: Sequence[Option]) -> Decorator:
    """All of `options`, in order, as click options of one command (the callback gets each value)."""
    return lambda fn: apply_options(fn, [click_option(o) for o in options])


def chosen_options(cls: Any, only: Optional[Sequence[str]] = None, skip: Sequence[str] = (),
                   help: Optional[Mapping[str, str]] = None) -> Tuple[Option, ...]:
    """The options `cls` declares, in field order: those named in `only` (None: all) but not in
    `skip`, with `help` retelling a field's help where a command uses it differently (the default,
    type and flags stay the field's)."""
    helps = help or {}
    return tuple(o._replace(help=helps.get(o.dest, o.help)) for o in options_of(cls)
                 if (only is None or o.dest in only) and o.dest not in skip)


def declared_options(cls: Any, name: str, options: Optional[Sequence[Option]] = None) -> Decorator:
    """The options `cls` declares (or `options`, some of them picked by `chosen_options`), handed to
    the command as one argument `name` = `cls(**values)`: a field left out keeps its default."""
    if options is None:
        options = options_of(cls)
    return grouped([click_option(o) for o in options], [o.dest for o in options], name, cls)


def _decimal(value: Any) -> float:
    number = strict_float(value)
    if number is None:
        raise ValueError(value)
    return number

