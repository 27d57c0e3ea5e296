"""A fork server for `python -m vmss_terminate ...` (and `python -c ...`) runs (tests/clifork.py drives it; stdlib only).

Started once per pytest-xdist worker, it imports the CLI's modules once and forks a child per run.
The child is a real process of its own (its pid, file descriptors 0-2 on /dev/null and the run's
output files, the run's environment and working directory, `sys.argv`); it runs
`vmss_terminate.__main__` as `python -m` does and ends through the interpreter's normal exit (an
uncaught exception prints its traceback, exit 1; SystemExit's code is the exit code; atexit and
non-daemon threads are waited for). What it saves is the interpreter's start-up and the imports,
~0.2 s of CPU per run.

Protocol: one JSON line per run on stdin, {"args", "env", "cwd", "stdout", "stderr"} (the two output
files exist), with "code" for `python -c CODE ARGS` instead of `python -m vmss_terminate ARGS`; the answers are JSON lines on the original stdout: {"pid": n} once the child is
forked, then {"returncode": n} (negative: killed by that signal, as subprocess reports it).
"""

from __future__ import annotations

import io
import json
import os
import runpy
import sys
from typing import Any, Dict

PRELOADED = ("vmss_terminate.entry", "vmss_terminate.agent.command", "vmss_terminate.cli",
             "vmss_terminate.commands.agent")


def _become(request: Dict[str, Any], answers: int) -> None:
    """In the child: the run's file descriptors, environment, directory and argv."""
    os.close(answers)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    for fd, path in ((1, request["stdout"]), (2, request["stderr"])):
        target = os.open(path, os.O_WRONLY | os.O_TRUNC)
        os.dup2(target, fd)
        os.close(target)
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                 encoding=sys.stdin.encoding, errors=sys.stdin.errors)
    os.environ.clear()
    os.environ.update(request["env"])
    os.chdir(request["cwd"])
    sys.argv = ["-m", *request["args"]]  # runpy puts the module's path first, as `python -m` does


def main() -> int:
    for name in PRELOADED:
        __import__(name)
    answers = os.dup(1)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)  # the children's stdout is their own file, never the answers' pipe
    os.close(null)
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            _become(request, answers)
            if request.get("code") is not None:  # python -c CODE ARGS
                sys.argv = ["-c", *request["args"]]
                exec(compile(request["code"], "<string>", "exec"), {"__name__": "__main__", "__builtins__": __builtins__})
            else:
                runpy.run_module("vmss_terminate", run_name="__main__", alter_sys=True)
            return 0  # the code returned: exit 0 through the interpreter's normal shutdown
        os.write(answers, (json.dumps({"pid": pid}) + "\n").encode())
        _, status = os.waitpid(pid, 0)
        os.write(answers, (json.dumps({"returncode": os.waitstatus_to_exitcode(status)}) + "\n").encode())
    return 0


if __name__ == "__main__":
    sys.exit(main())
