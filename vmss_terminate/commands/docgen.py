"""Generate docs/cli-reference.md from the click command tree, so the reference cannot drift.

    python -m vmss_terminate.cli > docs/cli-reference.md

The tree's root is a parameter (`render(root)`): this module sits below `cli.py` and never imports
it; `cli.py` hands it `main` when run as a module.

`tests/test_docs_cli_reference.py` walks the same tree (`walk()`) and checks the file both ways:
every command and option is documented, and nothing documented is missing from the CLI.
"""

from __future__ import annotations

import inspect
import sys
from typing import Iterator, List, Optional, Tuple

import click

PROG = "vmss-terminate"

HEADER = """# CLI reference

Every `vmss-terminate` command and option. Generated from the command definitions with
`python -m vmss_terminate.cli > docs/cli-reference.md`; `tests/test_docs_cli_reference.py`
fails when this file and the CLI disagree.

Exit codes (all commands): `0` done (including "no change"), `1` Azure or runtime failure,
`2` bad input (reported before any request is sent; unknown options, a single-value option given
twice and empty or malformed values included; numbers are plain ASCII digits such as `10` or `0.5`,
without spaces, `nan` or `inf`), `130` stopped by Ctrl-C, `143` stopped by SIGTERM
(a change stopped part-way says what was done, what remains and how to resume; every command it
prints to resume or follow up names the subscription and a non-default endpoint, so it runs as
printed); a signal after the work is done changes nothing (the report is printed whole, the exit
code is the work's). Each command's `--help` ends with its exit codes. Commands that serve
until stopped (`agent run`, `emulator ...`, `sandbox`) treat Ctrl-C and SIGTERM as their normal stop:
they shut down cleanly and exit 0. `plan
--detailed-exitcode` follows Terraform instead (see its entry).

Output (every command that prints a result): `-o table` (default; `text` is accepted as an alias),
`-o json` (one JSON document on stdout) or `-o tsv` (like `az -o tsv`: an object prints one row of
its scalar fields in the JSON's key order, nested objects and lists left out; a list prints one row
per element; empty cell for null). Progress bars (count, %, elapsed, ETA) appear only with `-o
table` on a terminal, on stderr.

Errors are one line on stderr, `error: ...`, never a traceback (`VMSS_TERMINATE_DEBUG=1` shows one
for an unexpected exception). With `-o json` that line is followed by one JSON line on stderr:
`{"error": {"message": "...", "type": "usage|azure|runtime|interrupted", "exit_code": N, ...}}`,
plus what the failure carries: `upgrade` (the partial upgrade report of an incomplete upgrade).
Stdout holds results only.
"""


def walk(command: click.Command, path: Tuple[str, ...] = (PROG,)) -> Iterator[Tuple[Tuple[str, ...], click.Command]]:
    """Every visible command, depth first, with its full path (`("vmss-terminate", "emulator", "imds")`)."""
    yield path, command
    if isinstance(command, click.Group):
        ctx = click.Context(command, info_name=path[-1])
        for name in command.list_commands(ctx):
            sub = command.get_command(ctx, name)
            if sub is not None and not getattr(sub, "hidden", False):
                yield from walk(sub, path + (name,))


def documented_params(command: click.Command) -> List[click.Parameter]:
    """Options and arguments worth documenting (not the automatic --help)."""
    return [p for p in command.params if not getattr(p, "hidden", False) and p.name != "help"]


def param_names(param: click.Parameter) -> List[str]:
    """`--instances`, `-n`, `--no-feature`...; an argument is its metavar (`NAME`)."""
    if isinstance(param, click.Option):
        return list(param.opts) + list(param.secondary_opts)
    return [(param.name or "").upper()]


def heading(path: Tuple[str, ...]) -> str:
    return "#" * min(len(path) + 1, 4) + f" `{' '.join(path)}`"


def render(root: click.Command) -> str:
    """The reference of the command tree under `root` (the CLI root group)."""
    lines: List[str] = [HEADER]
    for path, command in walk(root):
        ctx = click.Context(command, info_name=path[-1])
        lines.append(heading(path))
        lines.append("")
        usage = " ".join(command.collect_usage_pieces(ctx))
        lines.append(f"```\n{' '.join(path)} {usage}\n```".replace("  ", " "))
        lines.append("")
        help_text = (command.help or command.short_help or "").strip()
        if help_text:
            lines.append(inspect.cleandoc(help_text.split("\f")[0]))
            lines.append("")
        params = documented_params(command)
        if params:
            lines.append("| option | description |")
            lines.append("|---|---|")
            for param in params:
                cell = _param_cell(param, ctx).replace("|", "\\|")  # choices like [a|b] must not split the row
                lines.append(f"| {cell} | {_param_help(param, ctx)} |")
            lines.append("")
        if isinstance(command, click.Group):
            subs = [p[-1] for p, _ in walk(command, path) if len(p) == len(path) + 1]
            if subs:
                lines.append("Subcommands: " + ", ".join(f"`{s}`" for s in subs) + ".")
                lines.append("")
    return "\n".join(lines).rstrip() + "\n"


def _param_cell(param: click.Parameter, ctx: click.Context) -> str:
    """`` `--instances INTEGER`, `-n NAME` ``: each name in its own code span, metavar after a space."""
    suffix = ""
    if isinstance(param, click.Option) and not param.is_flag and not param.count:
        metavar = param.make_metavar(ctx) if _takes_ctx(param) else param.make_metavar()  # type: ignore[call-arg]
        suffix = f" {metavar}"
    if not isinstance(param, click.Option):
        return f"`{param_names(param)[0]}`"
    return ", ".join(f"`{n}{suffix}`" for n in param.opts) + "".join(
        f", `{n}`" for n in param.secondary_opts)


def _takes_ctx(param: click.Parameter) -> bool:
    return "ctx" in inspect.signature(param.make_metavar).parameters


def _param_help(param: click.Parameter, ctx: click.Context) -> str:
    text = ""
    if isinstance(param, click.Option):
        text = (param.help or "").strip()
        default = param.default
        if (
            not param.is_flag
            and param.show_default is not False
            and _has_value(default)
            and not callable(default)
        ):
            shown = ", ".join(map(str, default)) if isinstance(default, (list, tuple)) else default
            text += f" (default: `{shown}`)"
        if param.required:
            text += " (required)"
        if param.multiple:
            text += " (repeatable)"
        if param.envvar:
            envs = [param.envvar] if isinstance(param.envvar, str) else list(param.envvar)
            text += " (env: " + ", ".join(f"`{e}`" for e in envs) + ")"
    else:
        text = "argument" + (" (required)" if param.required else "")
    return text.replace("|", "\\|").replace("\n", " ").strip() or "-"


def _has_value(default: object) -> bool:
    # click >= 8.2 uses a sentinel object for "no default"
    return default not in (None, (), [], "") and "Sentinel" not in type(default).__name__ and \
        "UNSET" not in repr(default)


def main(root: click.Command, argv: Optional[List[str]] = None) -> int:
    """No argument: print the reference of `root`. `--check PATH`: exit 1 if PATH differs from it."""
    args = sys.argv[1:] if argv is None else argv
    text = render(root)
    if args[:1] == ["--check"] and len(args) == 2:
        with open(args[1], encoding="utf-8") as handle:
            if handle.read() == text:
                return 0
        sys.stderr.write(f"{args[1]} is out of date: python -m vmss_terminate.cli > {args[1]}\n")
        return 1
    if args:
        sys.stderr.write("usage: python -m vmss_terminate.cli [--check PATH]\n")
        return 2
    sys.stdout.write(text)
    return 0
