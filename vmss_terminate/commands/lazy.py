"""A click group that imports a subcommand's module only when that subcommand runs.

The agent runs on every instance: `vmss-terminate agent run` must not pay (in start time and
resident memory) for the control plane, emulators and sandbox. `--help` lists every command from
the summaries registered here, without importing them; `tests/test_cli_lazy.py` keeps those
summaries equal to the commands' own help.
"""

from __future__ import annotations

import importlib
from typing import Any, List, Mapping, NamedTuple, Optional, Tuple

import click


class Lazy(NamedTuple):
    """Where a subcommand lives (`module`, attribute `attr`), its one-line summary for `--help`,
    and the install extra it needs to run (None: the lean install runs it)."""

    module: str
    attr: str
    summary: str
    extra: Optional[str] = None


class LazyGroup(click.Group):
    def __init__(self, *args: Any, lazy: Optional[Mapping[str, Lazy]] = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})
        self.path: Tuple[str, ...] = ()  # its words after the program name (set by `describe`)

    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted(set(self.commands) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            entry = self.lazy[cmd_name]
            command = getattr(importlib.import_module(entry.module), entry.attr)
            refuse_repeated_options(command)
            describe(command, self.path + (cmd_name,))
            self.commands[cmd_name] = command
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: click.Context, args: List[str]) -> Tuple[Optional[str], Optional[click.Command],
                                                                              List[str]]:
        entry = self.lazy.get(args[0]) if args else None
        if entry is not None and entry.extra and not ctx.resilient_parsing and not _asks_help(args[1:], ctx):
            from vmss_terminate import extras  # only commands that need an extra pay for it

            extras.require(entry.extra, f"`{ctx.command_path} {args[0]}`")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, but a command not imported yet is summarised from its registration, and
        every summary is its whole first sentence (wrapped), never cut with "..."."""
        rows = []
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is not None:
                if command.hidden:
                    continue
                rows.append((name, command.get_short_help_str(WHOLE)))
            else:
                rows.append((name, click.Command(name, help=self.lazy[name].summary).get_short_help_str(WHOLE)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


WHOLE = 10_000
"""A summary limit no first sentence reaches: `--help` listings show it whole, wrapped."""

EXIT_CODES = ("Exit codes: 0 done (also: nothing to change), 1 Azure or runtime failure, 2 bad input (said "
              "before any request), 130 stopped by Ctrl-C, 143 stopped by SIGTERM.")
SERVING_EXIT_CODES = ("Exit codes: 0 stopped by Ctrl-C or SIGTERM (its normal stop), 1 runtime failure, "
                      "2 bad input (said before it starts).")
SERVING = {("agent", "run"), ("emulator", "arm"), ("emulator", "imds"), ("emulator", "kube"), ("sandbox",)}
"""Commands that serve until stopped: Ctrl-C and SIGTERM are how they end (docs/cli-reference.md)."""


def describe(command: click.Command, path: Tuple[str, ...]) -> None:
    """Give `command` (and every subcommand) its exit codes in the `--help` epilog, after any epilog
    of its own, and a summary that group listings show whole (click cuts it at ~45 characters)."""
    if isinstance(command, LazyGroup):
        command.path = path  # what it loads later is described under it
    if isinstance(command, click.Group):
        for name, sub in getattr(command, "commands", {}).items():
            describe(sub, path + (name,))
        return
    codes = SERVING_EXIT_CODES if path in SERVING else EXIT_CODES
    if any(param.name == "detailed_exitcode" for param in command.params):
        codes += " With --detailed-exitcode (Terraform's): 0 no change, 1 error, 2 changes pending or non-compliant."
    if codes not in (command.epilog or ""):
        command.epilog = f"{command.epilog}\n\n{codes}" if command.epilog else codes
    if not command.short_help and command.help:
        command.short_help = command.get_short_help_str(WHOLE)


def refuse_repeated_options(command: click.Command) -> None:
    """Make `command` (and every subcommand) refuse a single-value option given twice (`-n a -n b`
    would otherwise silently use b). Installed by LazyGroup on each command it loads (and so on the whole tree)."""
    original = command.parse_args

    def parse_args(ctx: click.Context, args: Any) -> Any:
        _, _, order = command.make_parser(ctx).parse_args(args=list(args))
        seen = set()
        for param in order:
            if not isinstance(param, click.Option) or param.multiple or param.count or param.is_flag:
                continue
            if param.name in seen:
                raise click.UsageError(f"{max(param.opts, key=len)} given more than once", ctx)
            seen.add(param.name)
        return original(ctx, args)

    command.parse_args = parse_args  # type: ignore[method-assign]
    for sub in getattr(command, "commands", {}).values():
        refuse_repeated_options(sub)


def _asks_help(args: List[str], ctx: click.Context) -> bool:
    return any(arg in ctx.help_option_names for arg in args)
