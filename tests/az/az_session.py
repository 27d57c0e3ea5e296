"""Runs many `az` commands in one process of the Azure CLI's own Python (tests/az/conftest.py's `Az`).

Started once per test module instead of one process per command: az's start-up (its interpreter, the
import of azure.cli.core and the command index) cost ~0.7 s of CPU per command, 23 s of the suite on
two cores. Each command gets a fresh `get_default_cli()` -- the object `az` builds per run, which reads
the configuration, the profile and the command index from AZURE_CONFIG_DIR again -- and is invoked the
way azure-cli's own `__main__` and its test SDK invoke it (`cli.invoke(args, out_file=...)`), so what
one command writes (cloud, login) is what the next reads, as between separate runs.

Protocol (stdlib only; runs under az's interpreter, not ours): one JSON line on stdin per command,
`{"args": [...]}`; one JSON line on the original stdout per answer, `{"exit_code": n, "stdout": "...",
"stderr": "..."}`, where stderr is everything the command logged (`--debug` goes there) or printed.
"""

from __future__ import annotations

import io
import json
import os
import sys
from typing import Any, Dict, List, TextIO


class _Switch(io.TextIOBase):
    """sys.stderr for the whole process: knack builds its log handlers once per process, on the
    sys.stderr of that moment, so each command's output is caught by pointing this at a new buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.target: TextIO = io.StringIO()

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        return self.target.write(text)

    def flush(self) -> None:
        self.target.flush()


def _run(args: List[str], err: _Switch) -> Dict[str, Any]:
    from azure.cli.core import get_default_cli

    out, err.target = io.StringIO(), io.StringIO()
    sys.stdout = out  # anything a command prints outside its result
    try:
        try:
            code = get_default_cli().invoke(args, out_file=out)
        except SystemExit as exc:  # as azure-cli's __main__: a command may exit directly
            code = exc.code if isinstance(exc.code, int) else 1
    finally:
        sys.stdout = sys.__stdout__
    return {"exit_code": code or 0, "stdout": out.getvalue(), "stderr": err.target.getvalue()}


def main() -> int:
    answers = os.fdopen(os.dup(1), "w", encoding="utf-8")
    os.dup2(2, 1)  # a stray write to file descriptor 1 (a child process) cannot break an answer
    err = _Switch()
    sys.stderr = err
    for line in sys.stdin:
        if line.strip():
            answers.write(json.dumps(_run(json.loads(line)["args"], err)) + "\n")
            answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
