"""The `vmss-terminate` console script (and `python -m vmss_terminate`).

`agent run`, the command every instance runs for weeks, starts without click: its options are
parsed by `agent/command.py` from the same definitions the click command is built from, so the
agent process carries only the agent (docs/benchmarks.md, "Install footprint"). Everything else,
including `agent run --help`, goes to the click CLI (`cli.py`).
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
    from vmss_terminate.cli import main as cli

    cli(args, prog_name="vmss-terminate", ends_process=True)
