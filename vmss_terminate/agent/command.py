"""`vmss-terminate agent run` as data and as one function, without click.

The agent runs on every instance, so its process should not carry the CLI framework: click and what
it imports (`inspect`, `ast`, `uuid`) are 2 MiB, more than the agent itself (docs/benchmarks.md).
Its options are defined once, here (`RUN_OPTIONS`): `commands/agent.py` turns them into the click
command (`--help`, docs/cli-reference.md), and `main()` parses them without click when the console
script starts `agent run` (`vmss_terminate/entry.py`). Both end in `run()`.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from typing import Any, Collection, Dict, List, NamedTuple, Optional, Sequence, Tuple

from vmss_terminate.errors import UsageError, VmssTerminateError
from vmss_terminate.scheduled_events import DEFAULT_API_VERSION

COMMAND_PATH = "vmss-terminate agent run"


class ArgumentError(UsageError):
    """The command line itself is wrong (unknown option, missing value): said with the command's path."""


class Option(NamedTuple):
    """One option: its flags, the parameter it fills, and how to read its value."""

    flags: Tuple[str, ...]
    dest: str
    kind: str = "text"  # text | float | flag | choice
    default: Any = None
    help: str = ""
    metavar: Optional[str] = None
    multiple: bool = False
    choices: Tuple[str, ...] = ()
    show_default: bool = False


IMDS_URL = Option(("--imds-url",), "imds_url", metavar="URL",
                  help="IMDS base URL [env VMSS_TERMINATE_IMDS_URL; default http://169.254.169.254].")
API_VERSION = Option(("--api-version",), "api_version", default=DEFAULT_API_VERSION, show_default=True,
                     help="Scheduled Events api-version (>= 2019-01-01, the first with Terminate), or "
                          "'latest': the newest IMDS serves, asked at start.")
RETRY_FOR = Option(("--retry-for",), "retry_for", "float", 70.0, show_default=True, metavar="S",
                   help="One-shot commands (run --once, events, approve): keep retrying an unavailable "
                        "IMDS this long before failing (exit 1). A long-running `run` never gives up.")
VM_NAME = Option(("--vm-name",), "vm_name", metavar="NAME",
                 help="This VM's name (default: instance metadata compute.name).")

RUN_OPTIONS: Tuple[Option, ...] = (
    IMDS_URL,
    Option(("--hook",), "hooks", multiple=True, metavar="CMD",
           help="Command run (no shell) for our own events, in order; repeatable. Event data in "
                "VMSS_TERMINATE_* env vars and the event JSON on stdin."),
    Option(("--hook-events",), "hook_events", default="Terminate", show_default=True, metavar="TYPES",
           help="Event types the hooks and the webhook run for, and /readyz drains on, besides Terminate, "
                "which is always one (comma list, 'all')."),
    Option(("--webhook",), "webhook", metavar="URL", help="POST each such event as JSON to URL (may use proxies)."),
    Option(("--webhook-format",), "webhook_format", "choice", "json", choices=("json", "slack", "teams"),
           show_default=True,
           help="json: the event, as a hook step before approval; slack / teams: incoming-webhook chat "
                "messages of what the agent did (draining, hook failed, approved), never delaying it."),
    Option(("--listen",), "listen", metavar="HOST:PORT",
           help="Serve /metrics (Prometheus), /healthz and /readyz (the drain probe) here; a bare PORT "
                "is loopback. Off by default."),
    Option(("--drain-delay",), "drain_delay", "float", 0.0, show_default=True, metavar="S",
           help="Approve at least S seconds after /readyz turned 503 (hooks run meanwhile), but no later "
                "than NotBefore minus --safety-margin."),
    Option(("--poll-interval",), "poll_interval", "float", 1.0, show_default=True, metavar="S",
           help="Seconds between Scheduled Events polls (the docs recommend 1)."),
    Option(("--state-file",), "state_file", metavar="PATH",
           help="Default /var/lib/vmss-terminate/state.json (%ProgramData%\\vmss-terminate on Windows)."),
    Option(("--once",), "once", "flag", help="Handle what is visible now (waiting for its hooks) and exit."),
    Option(("--approve",), "approve_types", metavar="TYPES",
           help="Event types approved (ours only) after hooks besides Terminate, which is always approved: "
                "comma list, e.g. Reboot,Redeploy; 'none' approves nothing (observe only)."),
    Option(("--approve-shared",), "approve_shared", "flag",
           help="Also approve an event of ours that names other VMs too (releases them before they drain)."),
    Option(("--on-hook-failure",), "on_hook_failure", "choice", "approve", choices=("approve", "wait"),
           show_default=True,
           help="approve: approve anyway (the VM goes at NotBefore regardless); wait: let NotBefore expire."),
    Option(("--safety-margin",), "safety_margin", "float", 15.0, show_default=True, metavar="S",
           help="Stop hooks this many seconds before NotBefore (0 <= S < 900)."),
    Option(("--stop-grace",), "stop_grace", "float", 45.0, show_default=True, metavar="S",
           help="On SIGTERM / Ctrl-C, let running hooks finish this long and approve what they drained, "
                "then stop the rest (they rerun on restart); 0 stops them at once."),
    Option(("--no-rerun-interrupted",), "no_rerun_interrupted", "flag",
           help="After a crash, do not rerun a hook that was started but not finished (treat it as failed)."),
    API_VERSION,
    VM_NAME,
    Option(("--request-timeout",), "request_timeout", "float", 10.0, show_default=True, metavar="S",
           help="Read timeout of each IMDS request."),
    Option(("--first-call-timeout",), "first_call_timeout", "float", 130.0, show_default=True, metavar="S",
           help="Read timeout of the first Scheduled Events call (IMDS may take 2 minutes to enable)."),
    Option(("--log-format",), "log_format", "choice", "text", choices=("text", "json"), show_default=True,
           help="Logs on stderr: human-readable lines, or one JSON object per line."),
    RETRY_FOR,
)


def parse_args(argv: Sequence[str], options: Sequence[Option] = RUN_OPTIONS) -> Tuple[Dict[str, Any], List[str]]:
    """`--name VALUE`, `--name=VALUE` and flags, as click reads them; ArgumentError for anything else,
    and for a single-value option given twice (as the click command refuses it). Returns the
    values and the options the command line named (the rest are defaults)."""
    values: Dict[str, Any] = {o.dest: (() if o.multiple else (False if o.kind == "flag" else o.default))
                              for o in options}
    by_flag = {flag: o for o in options for flag in o.flags}
    given: List[str] = []
    args = list(argv)
    while args:
        arg = args.pop(0)
        name, eq, inline = arg.partition("=") if arg.startswith("--") else (arg, "", "")
        option = by_flag.get(name)
        if option is None:
            raise ArgumentError(f"No such option: {name}" if arg.startswith("-") else f"Got unexpected extra argument ({arg})")
        if option.kind == "flag":
            if eq:
                raise ArgumentError(f"Option '{name}' does not take a value.")
            values[option.dest] = True
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
        try:
            return float(value)
        except ValueError:
            raise ArgumentError(f"Invalid value for '{name}': {value!r} is not a valid float.") from None
    if option.kind == "choice" and value not in option.choices:
        raise ArgumentError(f"Invalid value for '{name}': {value!r} is not one of "
                         + ", ".join(repr(c) for c in option.choices) + ".")
    return value


def run(given: Collection[str] = (), imds_url: Optional[str] = None, hooks: Tuple[str, ...] = (),
        hook_events: str = "Terminate", webhook: Optional[str] = None, webhook_format: str = "json",
        listen: Optional[str] = None, drain_delay: float = 0.0, poll_interval: float = 1.0,
        state_file: Optional[str] = None, once: bool = False, approve_types: Optional[str] = None,
        approve_shared: bool = False, on_hook_failure: str = "approve", safety_margin: float = 15.0,
        stop_grace: float = 45.0, no_rerun_interrupted: bool = False, api_version: str = DEFAULT_API_VERSION,
        vm_name: Optional[str] = None, request_timeout: float = 10.0, first_call_timeout: float = 130.0,
        log_format: str = "text", retry_for: float = 70.0) -> None:
    """Poll Scheduled Events; run hooks; approve only this VM's own events (until SIGTERM / Ctrl-C).
    `given`: the options the user named (the others are defaults)."""
    from vmss_terminate.agent import Agent, AgentConfig
    from vmss_terminate.agent.logs import configure
    from vmss_terminate.agent.ops import check_retry_for

    configure(log_format)
    check_retry_for(retry_for)
    if not once and "retry_for" in given:
        raise UsageError("--retry-for applies to run --once (and to events / approve): a long-running agent "
                         "retries IMDS until it is stopped and logs each outage (start, every minute, end)")
    config = AgentConfig(
        imds_url=imds_url, hooks=hooks, hook_events=hook_events, poll_interval=poll_interval,
        state_file=state_file, approve_types=approve_types if approve_types is not None else (),
        on_hook_failure=on_hook_failure, stop_grace=stop_grace,
        approve_shared=approve_shared, api_version=api_version, safety_margin=safety_margin,
        webhook=webhook, vm_name=vm_name, rerun_interrupted=not no_rerun_interrupted,
        request_timeout=request_timeout, first_call_timeout=first_call_timeout, drain_delay=drain_delay,
        webhook_format=webhook_format,
    )
    agent = Agent(config)
    server = None
    if listen is not None:
        from vmss_terminate.agent.probes import serve

        server = serve(agent, listen)
    stop = threading.Event()
    _stop_on_signals(stop)
    try:
        if once:
            agent.run_once(stop, retry_for=retry_for)
        else:
            agent.run(stop)
    finally:
        if server is not None:
            server.close()


def _stop_on_signals(stop: threading.Event) -> None:
    """SIGTERM / Ctrl-C (and Ctrl-Break on Windows) end the loop cleanly. CLI only: the library
    never installs handlers, so agents can run in threads."""

    def handler(signum: int, frame: Any) -> None:
        stop.set()

    for name in ("SIGTERM", "SIGINT", "SIGBREAK"):
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                signal.signal(sig, handler)
            except (ValueError, OSError):  # not the main thread, or unsupported here
                pass


def main(argv: Sequence[str]) -> int:
    """`vmss-terminate agent run ARGS` without click: the exit code; errors as one `error:` line."""
    try:
        values, given = parse_args(argv)
        run(given, **values)
    except ArgumentError as exc:
        return _fail(f"{COMMAND_PATH}: {exc}", exc.exit_code)
    except VmssTerminateError as exc:
        return _fail(exc.cli_message or str(exc), exc.exit_code)
    except KeyboardInterrupt:  # before the handlers above were installed
        return _fail("interrupted by Ctrl-C", 130)
    except Exception as exc:  # noqa: BLE001 - the one place this path reports failures
        if os.environ.get("VMSS_TERMINATE_DEBUG"):
            raise
        return _fail(f"unexpected {type(exc).__name__}: {exc} (set VMSS_TERMINATE_DEBUG=1 for a traceback)", 1)
    return 0


def _fail(message: str, code: int) -> int:
    sys.stderr.write(f"error: {' '.join(message.split())}\n")
    return code
