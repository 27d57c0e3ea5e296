"""The `vmss-terminate` console script (and `python -m vmss_terminate`).

`agent run`, the command every instance runs for weeks, starts without click: its options are
parsed by `agent/command.py` from the same definitions the click command is built from, so the
agent process carries only the agent (docs/benchmarks.md, "Install footprint"). Everything else,
including `agent run --help`, goes to the click CLI (`cli.py`) -- except `[COMMAND ...] --help`,
printed from the text click renders for it, kept in `commands/helptexts.py` (`commands/helpcache.py`).
"""

from __future__ import annotations

import sys
from typing import List, Optional


def main(argv: Optional[List[str]] = None) -> None:
    args = sys.argv[1:] if argv is None else list(argv)
    if args[:2] == ["agent", "run"] and not {"-h", "--help"} & set(args[2:]):
        # Handlers first, before the agent's imports (about a second on a busy VM): a SIGTERM that
        # comes meanwhile (systemctl stop right after start) still ends with a stop line and exit 0.
        from vmss_terminate.signals import AGENT_STOP_SIGNALS, StopOnSignals

        signals = StopOnSignals(AGENT_STOP_SIGNALS).install()
        from vmss_terminate.agent.command import main as run_agent

        sys.exit(run_agent(args[2:], signals))
    text = cached_help(args)
    if text is not None:
        sys.stdout.write(text)
        sys.exit(0)
    from vmss_terminate.cli import main as cli

    cli(args, prog_name="vmss-terminate", ends_process=True)


def cached_help(args: List[str]) -> Optional[str]:
    """The help `[COMMAND ...] --help` prints, from `commands/helptexts.py` (what click renders, kept
    as text: no command module, not even click, is imported to print it), or None for click to
    render: other arguments, a terminal narrower than 80 columns, a command not in the cache."""
    if not args or args[-1] not in ("--help", "-h") or any(not a or a.startswith("-") for a in args[:-1]):
        return None
    import shutil

    try:
        from vmss_terminate.commands.helptexts import HELP, MIN_COLUMNS
    except ImportError:
        return None
    if shutil.get_terminal_size().columns < MIN_COLUMNS:
        return None
    return HELP.get(" ".join(args[:-1]))
