"""`vmss-terminate agent run` as data and as one function, without click.

The agent runs on every instance, so its process should not carry the CLI framework: click and what
it imports (`inspect`, `ast`, `uuid`) are 2 MiB, more than the agent itself (docs/benchmarks.md).
Its options are declared once, as fields of `AgentConfig` (agent/config.py, what the agent does)
and of `RunOptions` below (how the command runs it); `RUN_OPTIONS` reads them back.
`commands/agent.py` turns them into the click command (`--help`, docs/cli-reference.md), and
`main()` parses them without click when the console script starts `agent run`
(`vmss_terminate/entry.py`). Both end in `run(config, options)`.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import sys
from dataclasses import dataclass
from typing import Any, Collection, Dict, List, Mapping, Optional, Sequence, Tuple

from vmss_terminate.agent.config import AgentConfig, refuse_without_kubernetes
from vmss_terminate.errors import UsageError, VmssTerminateError
from vmss_terminate.params import Option, file_path, option, options_of, shown, strict_float
from vmss_terminate.signals import AGENT_STOP_SIGNALS, StopOnSignals

COMMAND_PATH = "vmss-terminate agent run"


class ArgumentError(UsageError):
    """The command line itself is wrong (unknown option, missing value): said with the command's path."""


@dataclass(frozen=True)
class RunOptions:
    """How `agent run` runs the agent (the agent's own options are `AgentConfig`'s)."""

    listen: Optional[str] = option(
        metavar="HOST:PORT",
        help="Serve /metrics (Prometheus), /healthz and /readyz (the drain probe) here; a bare PORT "
             "is loopback; an IPv6 address in brackets ([fd00::4]:9100; [10.0.0.4]:9100 works too). "
             "Off by default.")
    once: bool = option(False, help="Handle what is visible now (waiting for its hooks) and exit.")
    log_format: str = option("text", choices=("text", "json"), show_default=True,
                             help="Logs on stderr: human-readable lines, or one JSON object per line.")
    retry_for: float = option(
        70.0, show_default=True, metavar="S",
        help="One-shot commands (run --once, events, approve): keep retrying an unavailable "
             "IMDS this long before failing (exit 1). A long-running `run` never gives up.")


CONFIG_OPTIONS: Tuple[Option, ...] = options_of(AgentConfig)
RUN_OPTIONS: Tuple[Option, ...] = CONFIG_OPTIONS + options_of(RunOptions)
"""Every option of `agent run`, in `--help` order: the agent's, then the command's."""


def by_dest(dest: str) -> Option:
    """One of `RUN_OPTIONS` (also taken by `agent events` and `agent approve`)."""
    return next(o for o in RUN_OPTIONS if o.dest == dest)


def build(values: Mapping[str, Any]) -> Tuple[AgentConfig, RunOptions]:
    """The objects a parsed command line fills in (`values`: option dest -> value)."""
    command = {f.name for f in dataclasses.fields(RunOptions)}
    return (AgentConfig(**{k: v for k, v in values.items() if k not in command}),
            RunOptions(**{k: v for k, v in values.items() if k in command}))


def parse_args(argv: Sequence[str], options: Sequence[Option] = RUN_OPTIONS) -> Tuple[Dict[str, Any], List[str]]:
    """`--name VALUE`, `--name=VALUE` and flags, as click reads them; ArgumentError for anything else,
    and for a single-value option given twice (as the click command refuses it). Returns the
    values and the options the command line named (the rest are defaults)."""
    values: Dict[str, Any] = {o.dest: (() if o.multiple else o.default) for o in options}
    by_flag = {flag: o for o in options for flag in o.flags}
    given: List[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        option = by_flag.get(name)
        if option is None:
            raise ArgumentError(f"No such option: {name}" if arg.startswith("-") else f"Got unexpected extra argument ({arg})")
        if option.kind == "switch":  # no agent option is one; refused rather than misread
            raise ArgumentError(f"Option '{name}' (--x/--no-x) is not served by this parser")
        if option.kind == "flag":
            if eq:
                raise ArgumentError(f"Option '{name}' does not take a value.")
            values[option.dest] = not option.default
            given.append(option.dest)
            continue
        if not eq and not args:
            raise ArgumentError(f"Option '{name}' requires an argument.")
        value = inline if eq else args.pop(0)
        if option.dest in given and not option.multiple:
            raise ArgumentError(f"{option.flags[-1]} given more than once")
        given.append(option.dest)
        converted = _convert(option, name, value)
        values[option.dest] = values[option.dest] + (converted,) if option.multiple else converted
    return values, given


def _convert(option: Option, name: str, value: str) -> Any:
    if option.kind == "float":
        number = strict_float(value)  # ASCII digits, bounded length: as the click command
        if number is None:
            raise ArgumentError(f"Invalid value for '{name}': {shown(value)} is not a valid float.")
        return number
    if option.kind == "choice" and value not in option.choices:
        raise ArgumentError(f"Invalid value for '{name}': {value!r} is not one of "
                         + ", ".join(repr(c) for c in option.choices) + ".")
    if option.kind == "file":
        try:
            return file_path(option.flag, value)
        except UsageError as exc:  # said as the click command says it: with the command's path
            raise ArgumentError(str(exc)) from None
    if option.parse is not None:  # the library's parser: its UsageError is the message
        return option.parse(value)
    return value


def run(config: AgentConfig, options: RunOptions = RunOptions(), given: Collection[str] = (),
        signals: Optional[StopOnSignals] = None) -> None:
    """Poll Scheduled Events; run hooks; approve only this VM's own events (until SIGTERM / Ctrl-C).
    `given`: the options the user named (the others are defaults). `signals`: handlers installed
    already (the console script installs them before its imports); else installed here."""
    signals = signals if signals is not None else StopOnSignals(AGENT_STOP_SIGNALS).install()
    try:
        _run(config, options, given, signals)
    finally:
        signals.restore()


def check_options(config: AgentConfig, options: RunOptions, given: Collection[str]) -> None:
    """The command's own checks of a parsed command line (UsageError), before anything starts."""
    from vmss_terminate.agent.ops import check_retry_for

    check_retry_for(options.retry_for)
    if options.listen is not None:
        from vmss_terminate.pipeline.probes import parse_listen

        parse_listen(options.listen, any_port=False)  # bad input before the agent starts; port 0 refused
    if not options.once and "retry_for" in given:
        raise UsageError("--retry-for applies to run --once (and to events / approve): a long-running agent "
                         "retries IMDS until it is stopped and logs each outage (start, every minute, end)")
    refuse_without_kubernetes(given, config.kubernetes)  # --taint named at its default value too


def check_elsewhere(argv: Sequence[str]) -> Tuple[AgentConfig, RunOptions, List[str]]:
    """`agent run ARGV` checked as `main` checks it, for a command line that runs on another machine
    (a rendered DaemonSet): nothing starts, and nothing of this machine is looked at -- a hook's
    program is checked for its quoting only, it exists (or not) on the node. UsageError if wrong."""
    from vmss_terminate.pipeline.process import split_command

    values, given = parse_args(argv)
    config, options = build(values)
    check_options(config, options, given)
    for hook in config.hooks:
        split_command(hook)
    dataclasses.replace(config, hooks=(), node_name=config.node_name or "node").validated()
    return config, options, given


def _run(config: AgentConfig, options: RunOptions, given: Collection[str], signals: StopOnSignals) -> None:
    from vmss_terminate.agent import Agent
    from vmss_terminate.pipeline.logs import configure

    configure(options.log_format)
    check_options(config, options, given)
    agent = Agent(config)
    server = None
    if options.listen is not None:
        from vmss_terminate.agent.probes import serve

        server = serve(agent, options.listen)
    # SIGTERM / Ctrl-C (and Ctrl-Break on Windows) end the loop cleanly. CLI only: the library never
    # installs handlers, so agents can run in threads.
    try:
        if options.once:
            agent.run_once(signals.stop, retry_for=options.retry_for)
        else:
            agent.run(signals.stop)
    finally:
        if server is not None:
            server.close()
    if signals.signum is not None:  # the stop line, also when nothing was in flight
        logging.getLogger("vmss_terminate.agent").info("stopped by %s%s", _signal_name(signals.signum),
                                                       "" if agent.started_at is not None or options.once
                                                       else " before the agent started")


def _signal_name(signum: int) -> str:
    import signal

    try:
        return signal.Signals(signum).name
    except ValueError:
        return f"signal {signum}"


def main(argv: Sequence[str], signals: Optional[StopOnSignals] = None) -> int:
    """`vmss-terminate agent run ARGS` without click: the exit code; errors as one `error:` line.
    `signals`: the stop handlers the console script installed first thing."""
    try:
        values, given = parse_args(argv)
        config, options = build(values)
        run(config, options, given, signals)
    except ArgumentError as exc:
        return _fail(f"{COMMAND_PATH}: {exc}", exc.exit_code)
    except VmssTerminateError as exc:
        return _fail(exc.cli_message or str(exc), exc.exit_code)
    except KeyboardInterrupt:  # before the handlers above were installed
        return _fail("interrupted by Ctrl-C", 130)
    except Exception as exc:  # the one place this path reports failures
        if os.environ.get("VMSS_TERMINATE_DEBUG"):
            raise
        return _fail(f"unexpected {type(exc).__name__}: {exc} (set VMSS_TERMINATE_DEBUG=1 for a traceback)", 1)
    return 0


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"error: {' '.join(message.split())}\n")
    return code
