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

    def list_commands(self, ctx: click.Context) -> List[str]:
        return sorted(set(self.commands) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> Optional[click.Command]:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            entry = self.lazy[cmd_name]
            command = getattr(importlib.import_module(entry.module), entry.attr)
            refuse_repeated_options(command)
            self.commands[cmd_name] = command
        return self.commands.get(cmd_name)

    def resolve_command(self, ctx: click.Context, args: List[str]) -> Tuple[Optional[str], Optional[click.Command],
                                                                              List[str]]:
        entry = self.lazy.get(args[0]) if args else None
        if entry is not None and entry.extra and not ctx.resilient_parsing and not _asks_help(args[1:], ctx):
            from vmss_terminate import extras  # noqa: PLC0415 - only commands that need an extra pay for it

            extras.require(entry.extra, f"`{ctx.command_path} {args[0]}`")
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """click's listing, but a command not imported yet is summarised from its registration."""
        rows = []
        limit = formatter.width - 6 - max((len(name) for name in self.list_commands(ctx)), default=0)
        for name in self.list_commands(ctx):
            command = self.commands.get(name)
            if command is not None:
                if command.hidden:
                    continue
                rows.append((name, command.get_short_help_str(limit)))
            else:
                # click shortens the summary exactly as it would the command's own help
                rows.append((name, click.Command(name, help=self.lazy[name].summary).get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


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
