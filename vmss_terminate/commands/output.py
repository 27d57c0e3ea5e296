"""One output vocabulary for every command: `-o table|json|tsv`, and how errors are printed.

* `table` (the default; `text` is accepted as an alias): lines for people.
* `json`: one indented JSON document on stdout.
* `tsv`: tab-separated values like the Azure CLI's `-o tsv`: an object prints one row of its
  scalar fields (in the JSON's key order; nested objects and lists are left out), a list one row
  per element; None is an empty cell, tabs and newlines inside values become spaces.

Errors always go to stderr as one line, `error: <message>`. With `-o json` that line is followed by
one JSON line, `{"error": {"message": ..., "type": "usage"|"azure"|"runtime"|"interrupted",
"exit_code": N, ...}}`, plus fields the failure carries (an incomplete upgrade's `upgrade` report,
an ARM error's `code` and `http_status`). Stdout holds results only, never an error.
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, TypeVar

import click

from vmss_terminate.signals import finish_quietly

_F = TypeVar("_F", bound=Callable[..., Any])

FORMATS = ("table", "json", "tsv")
ALIASES = {"text": "table"}  # the agent/demo/sandbox spelling before one vocabulary


class OutputFormat(click.Choice):
    """`table|json|tsv`, case-insensitive, with `text` read as `table`; `extra` formats a command
    adds on top (fleet audit: csv)."""

    def __init__(self, extra: Sequence[str] = ()) -> None:
        super().__init__(FORMATS + tuple(extra), case_sensitive=False)

    def convert(self, value: Any, param: Optional[click.Parameter], ctx: Optional[click.Context]) -> Any:
        text = str(value).lower()
        return super().convert(ALIASES.get(text, text), param, ctx)


def output_option(help: str = "table: for people; json: one JSON document; tsv: tab-separated values.",
                  extra: Sequence[str] = ()) -> Callable[[_F], _F]:
    """The `-o/--output` option every command that prints a result takes."""
    return click.option("-o", "--output", type=OutputFormat(extra), default="table", show_default=True, help=help)


def echo_json(data: Any) -> None:
    """`--output json`: one indented JSON document on stdout (results pass their `to_dict()`)."""
    click.echo(json.dumps(data, indent=2))


def echo_json_list(items: Iterable[Any]) -> None:
    """`--output json` for a long list (a 10,000-set audit): the same text as
    `echo_json(list(items))`, written an item at a time (in ~64 KB writes), so neither every
    item's dict nor the whole document is held at once."""
    batch: List[str] = []
    size = 0
    for chunk in json_list_chunks(items):
        batch.append(chunk)
        size += len(chunk)
        if size >= 65536:
            click.echo("".join(batch), nl=False)
            batch, size = [], 0
    click.echo("".join(batch))


def json_list_chunks(items: Iterable[Any]) -> Iterator[str]:
    """`json.dumps(list(items), indent=2)` in pieces, one per item (JSON strings hold no raw
    newline, so indenting an item's own lines by two spaces nests it exactly as dumps would)."""
    first = True
    for item in items:
        yield ("[\n  " if first else ",\n  ") + json.dumps(item, indent=2).replace("\n", "\n  ")
        first = False
    yield "[]" if first else "\n]"


def tsv_lines(data: Any) -> List[str]:
    """Rows of `data` the way `az -o tsv` prints them (see the module docstring)."""
    rows = data if isinstance(data, list) else [data]
    return ["\t".join(_cells(row)) for row in rows]


def _cells(row: Any) -> List[str]:
    values: Iterable[Any] = row.values() if isinstance(row, dict) else row if isinstance(row, list) else [row]
    return [_cell(value) for value in values if not isinstance(value, (dict, list))]


def _cell(value: Any) -> str:
    if value is None:
        return ""
    return " ".join(str(value).replace("\t", " ").splitlines())


def emit(result: Any, output: str, lines: Optional[Callable[[], Iterable[str]]] = None) -> None:
    """Print a library result (`to_dict()` for json/tsv, `lines()` -- or `lines` -- for table). The
    work is done: a stop signal from here on changes nothing (the report is printed whole)."""
    work_done()
    if output == "json":
        echo_json(result.to_dict())
    elif output == "tsv":
        for line in tsv_lines(result.to_dict()):
            click.echo(line)
    else:
        for line in (lines or result.lines)():
            click.echo(line)


SIGNALS_OWNED = "vmss_terminate.signals_owned"
"""`ctx.meta` key the CLI root sets: it restores the signal handlers when it returns."""


def work_done() -> None:
    """The command's work is done and its report is about to be printed: from here a stop signal
    changes nothing (`signals.finish_quietly`). Only under the CLI root, which puts the handlers
    back for an embedding caller; a function called on its own leaves the process's handlers be."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.meta.get(SIGNALS_OWNED):
        finish_quietly()


def requested_output(args: Sequence[str]) -> str:
    """The `-o` value in a raw argument list (the last one wins), read without click so that an
    error found while parsing is still printed in the format the user asked for."""
    found = "table"
    items = list(args)
    for index, arg in enumerate(items):
        if arg == "--":
            break
        value = None
        if arg in ("-o", "--output") and index + 1 < len(items):
            value = items[index + 1]
        elif arg.startswith("--output="):
            value = arg.split("=", 1)[1]
        elif arg.startswith("-o") and len(arg) > 2 and not arg.startswith("--"):
            value = arg[2:]
        if value is not None:
            found = ALIASES.get(value.lower(), value.lower())
    return found


def report_error(message: str, exit_code: int, kind: str, output: str,
                 details: Optional[Dict[str, Any]] = None) -> None:
    """The one way a command reports failure: one `error:` line, plus the JSON object with -o json."""
    click.echo(f"error: {' '.join(message.split())}", err=True)
    if output == "json":
        error: Dict[str, Any] = {"message": message, "type": kind, "exit_code": exit_code}
        error.update(details or {})
        click.echo(json.dumps({"error": error}), err=True)
