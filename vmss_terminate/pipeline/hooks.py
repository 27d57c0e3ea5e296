"""Hook steps: what runs for an event before it is approved.

Three kinds, run in this order for an event whose type they subscribe to:
1. `--hook CMD` commands (in the order given), without a shell; event data in VMSS_TERMINATE_*
   environment variables and the event's JSON on stdin;
2. Python callables registered with `Agent.on(event_type, fn)`, called as `fn(event, context)`;
3. the optional JSON webhook (`--webhook URL`), POSTed with its own session (which, unlike IMDS,
   may use the environment's proxies).

Every step is bounded by a deadline (NotBefore minus a safety margin, read again while waiting so
a changed NotBefore counts) and by cancellation (the agent is stopping). A command past its
deadline has its whole process tree stopped; a Python callable cannot be killed, so it is abandoned
(left running in its daemon thread) and counted as failed.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import threading
from dataclasses import dataclass, field
from typing import Any, Callable, Dict, List, Optional, Tuple
from urllib.parse import urlsplit

from vmss_terminate.clock import Clock
from vmss_terminate.pipeline import process
from vmss_terminate.pipeline.events import EVERY_LISTED_VM, Event

OK = "ok"
FAILED = "failed"
DEADLINE = "deadline"
CANCELLED = "cancelled"
GONE = "gone"  # the event left the document for good (scale-in cancelled): the step stopped
LOST = "lost"  # the source may no longer act on the event (a queue replica lost its lease): stopped

WAKE_EVERY = 1.0  # clock seconds between re-reading the deadline while a step runs
#: A hook that cannot start for lack of one of these (descriptors, processes, memory) is tried
#: again until its deadline: the shortage is usually brief, and failing at once would let
#: --on-hook-failure approve the VM undrained.
RESOURCE_ERRNOS = frozenset({errno.EMFILE, errno.ENFILE, errno.ENOMEM, errno.EAGAIN})
_START_RETRY_EVERY = 0.5  # clock seconds between such tries

log = logging.getLogger(__name__)


@dataclass
class StepResult:
    outcome: str            # ok | failed | deadline | cancelled
    detail: str = ""
    exit_code: Optional[int] = None


@dataclass
class HookContext:
    """What a Python hook gets besides the event."""

    vm_name: str
    clock: Clock
    deadline: Callable[[], Optional[float]]
    cancelled: threading.Event
    data: Dict[str, Any] = field(default_factory=dict)
    vm_names: Tuple[str, ...] = ()  # the VMs the run is for: (vm_name,), or every listed VM with vm_name ""

    def seconds_left(self) -> Optional[float]:
        """Clock seconds until the hook is stopped (None: no deadline known)."""
        deadline = self.deadline()
        return None if deadline is None else deadline - self.clock.now()


@dataclass
class Run:
    """One step's run: the event, the clock, the deadline and a way to be told to give up."""

    event: Event
    vm_name: str
    clock: Clock
    deadline: Callable[[], Optional[float]]
    cancelled: threading.Event
    wake: threading.Event
    kill_grace: float = 5.0
    on_process: Optional[Callable[[int], object]] = None  # its result is ignored
    gone: Callable[[], bool] = lambda: False  # the event left the document for good (e.g. a cancelled scale-in)
    held: Callable[[], bool] = lambda: True  # False: the source lost the event (its lease) to another replica

    def wait(self, finished: Callable[[], bool]) -> str:
        """Wait until `finished()`, the deadline, cancellation or the event's loss; returns
        ok|deadline|cancelled|lost (lost, like cancelled, stops the step at once)."""
        while True:
            if finished():
                return OK
            if self.cancelled.is_set():
                return CANCELLED
            if not self.held():
                return LOST
            deadline = self.deadline()
            remaining = WAKE_EVERY if deadline is None else deadline - self.clock.now()
            if remaining <= 0:
                return DEADLINE
            self.wake.clear()
            if finished():
                return OK
            self.clock.wait(self.wake, min(remaining, WAKE_EVERY))


def event_variables(event: Event, vm_name: str, deadline: Optional[float]) -> Dict[str, str]:
    """The VMSS_TERMINATE_* variables a command hook gets (RESOURCES is JSON, so always passable)."""
    return {
        "VMSS_TERMINATE_EVENT_ID": event.event_id,
        "VMSS_TERMINATE_EVENT_TYPE": event.event_type,
        "VMSS_TERMINATE_EVENT_STATUS": event.status,
        "VMSS_TERMINATE_NOT_BEFORE": event.not_before_raw,
        "VMSS_TERMINATE_VM_NAME": "" if vm_name == EVERY_LISTED_VM else vm_name,
        "VMSS_TERMINATE_RESOURCES": json.dumps(list(event.resources)),
        "VMSS_TERMINATE_DEADLINE": "" if deadline is None else str(int(deadline)),
        # api-version 2019-08-01 / 2020-07-01 and later; empty when the version in use lacks them
        "VMSS_TERMINATE_EVENT_SOURCE": "" if event.event_source is None else str(event.event_source),
        "VMSS_TERMINATE_DURATION_SECONDS": "" if event.duration_in_seconds is None else str(event.duration_in_seconds),
        # every listed VM's full resource id, from a source that knows them (a central handler's)
        **({"VMSS_TERMINATE_RESOURCE_IDS": json.dumps(dict(event.resource_ids))} if event.resource_ids else {}),
    }


def unpassable_variables(event: Event, vm_name: str) -> List[str]:
    """The variables of `event` that no process environment can carry: a NUL byte (the OS ends the
    string there) or text the file-system encoding cannot encode (a lone surrogate from JSON)."""
    bad = []
    for name, value in event_variables(event, vm_name, None).items():
        try:
            if "\x00" in value or b"\x00" in os.fsencode(value):
                bad.append(name)
        except UnicodeError:
            bad.append(name)
    return bad


def hook_env(event: Event, vm_name: str, deadline: Optional[float]) -> Dict[str, str]:
    env = dict(os.environ)
    env.update(event_variables(event, vm_name, deadline))
    return env


class CommandHook:
    """`--hook CMD`: a process, no shell."""

    def __init__(self, command: str, index: int = 0) -> None:
        argv = process.split_command(command)  # validate now: bad input fails at startup, not at NotBefore
        self.command = command
        program = argv[0] if isinstance(argv, list) else _first_word_windows(command)
        # Logged and stored in the state file: the program only, never its arguments (may hold secrets).
        self.name = f"hook#{index + 1}:{program}"

    def run(self, run: Run) -> StepResult:
        env = hook_env(run.event, run.vm_name, run.deadline())
        stdin = json.dumps(run.event.to_json()).encode("utf-8")
        started = self._start(run, env, stdin)
        if isinstance(started, StepResult):
            return started
        proc = started
        if run.on_process is not None:
            run.on_process(proc.pid)
        try:
            threading.Thread(target=_wake_on_exit, args=(proc, run.wake), daemon=True,
                             name=f"hook-wait:{proc.pid}").start()
        except RuntimeError:  # no thread to spare: run.wait still looks every WAKE_EVERY
            pass
        outcome = run.wait(lambda: proc.poll() is not None)
        if outcome != OK:
            process.stop_tree(proc, grace=run.kill_grace)
            what = {DEADLINE: "deadline (NotBefore minus safety margin) reached",
                    LOST: "the event was lost to another replica (its lease)"}.get(outcome, "agent stopping")
            return StepResult(outcome, f"stopped: {what}", proc.returncode)
        code = proc.returncode
        if code == 0:
            return StepResult(OK, "exit 0", 0)
        return StepResult(FAILED, f"exit {code}", code)


    def _start(self, run: Run, env: Dict[str, str], stdin: bytes) -> Any:
        """The started process, or the StepResult that ends the step: a start that failed for lack
        of a resource (RESOURCE_ERRNOS) is tried again every _START_RETRY_EVERY s until the
        deadline or cancellation; any other failure ends it at once."""
        said = False
        while True:
            try:
                return process.start(self.command, env, stdin)
            except OSError as exc:
                if exc.errno not in RESOURCE_ERRNOS:
                    return StepResult(FAILED, f"cannot start: {exc}")
                reason = exc.strerror or str(exc)
            except (ValueError, UnicodeError) as exc:  # ValueError: "embedded null byte"
                return StepResult(FAILED, f"cannot start: {exc}")
            if not said:
                said = True
                log.warning("hook %s cannot start (%s); trying again until its deadline", self.name, reason)
            if run.cancelled.is_set():
                return StepResult(CANCELLED, f"not started ({reason}): agent stopping")
            if not run.held():
                return StepResult(LOST, f"not started ({reason}): the event was lost to another replica")
            deadline = run.deadline()
            left = _START_RETRY_EVERY if deadline is None else deadline - run.clock.now()
            if left <= 0:
                return StepResult(FAILED, f"cannot start: {reason} (tried again until the deadline)")
            run.clock.wait(run.cancelled, min(left, _START_RETRY_EVERY))


def _first_word_windows(command: str) -> str:
    text = command.strip()
    if text.startswith('"'):
        return text[1:].split('"', 1)[0]
    return text.split()[0]


def redact_url(url: str) -> str:
    """scheme://host/path only: credentials and query strings (tokens) never reach the log."""
    try:
        parts = urlsplit(url)
        host = parts.hostname or ""
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # unparseable (bad IPv6 literal or port): show nothing that could be a secret
        return "<unparseable URL>"
    return f"{parts.scheme}://{host}{port}{parts.path}"


def _wake_on_exit(proc: Any, wake: threading.Event) -> None:
    proc.wait()
    wake.set()


def acting_for(run: "Run") -> Tuple[str, Tuple[str, ...]]:
    """The VM a run is for and the VMs: a source acting for every listed VM (`EVERY_LISTED_VM`, a
    central handler's once-per-event step) gives "" and every VM the event lists, never the sentinel."""
    if run.vm_name == EVERY_LISTED_VM:
        return "", tuple(run.event.resources)
    return run.vm_name, (run.vm_name,)


class PythonHook:
    """`agent.on(type, fn)`: `fn(event, context)` in a daemon thread; an exception is a failure."""

    def __init__(self, fn: Callable[[Event, HookContext], Any]) -> None:
        self.fn = fn
        self.name = f"python:{getattr(fn, '__qualname__', repr(fn))}"

    def run(self, run: Run) -> StepResult:
        vm_name, vm_names = acting_for(run)
        context = HookContext(vm_name, run.clock, run.deadline, run.cancelled, vm_names=vm_names)
        outcome, result = _bounded(run, f"hook:{self.name}", lambda: self.fn(run.event, context))
        if outcome != OK:
            return StepResult(outcome, "abandoned (a Python hook cannot be killed; it keeps running)")
        if "error" in result:
            return StepResult(FAILED, result["error"])
        return StepResult(OK, "returned")


def _bounded(run: Run, name: str, call: Callable[[], Any]) -> Tuple[str, Dict[str, Any]]:
    """Run `call()` in a daemon thread, waiting at most until the step's deadline or cancellation
    (then the thread is abandoned). Returns (ok|deadline|cancelled, {"value": ...} or {"error": ...})."""
    done = threading.Event()
    result: Dict[str, Any] = {}

    def target() -> None:
        try:
            result["value"] = call()
        except BaseException as exc:  # noqa: B036 - a hook must not kill the worker
            result["error"] = f"{exc.__class__.__name__}: {exc}"
            result["exception"] = exc
        finally:
            done.set()
            run.wake.set()

    threading.Thread(target=target, name=name, daemon=True).start()
    return run.wait(done.is_set), result


class WebhookHook:
    """`--webhook URL`: POST the event as JSON; a 2xx answer is success.

    Its own requests session with the environment's proxy settings: a webhook is an ordinary
    outbound call, unlike IMDS, which must never see a proxy.
    """

    def __init__(self, url: str, timeout: float = 10.0) -> None:
        self.url = url
        self.timeout = timeout
        self.name = f"webhook:{redact_url(url)}"
        self._session: Any = None

    def run(self, run: Run) -> StepResult:
        import requests

        if self._session is None:
            self._session = requests.Session()
        vm_name, vm_names = acting_for(run)
        payload = {"vm_name": vm_name, "vm_names": list(vm_names), "event": run.event.to_json(), "deadline": run.deadline(),
                   "event_source": run.event.event_source, "duration_in_seconds": run.event.duration_in_seconds}
        left = run.deadline()
        timeout = self.timeout if left is None else max(0.5, min(self.timeout, left - run.clock.now()))

        def post() -> int:  # the status is all we need: the body is never read (it may be huge or slow)
            with self._session.post(self.url, json=payload, timeout=timeout, stream=True) as response:
                return int(response.status_code)

        # In a thread, under the step's deadline: a per-read timeout alone does not bound an answer
        # that trickles in, and the agent stopping must not wait for it.
        outcome, result = _bounded(run, f"hook:{self.name}", post)
        if outcome != OK:
            return StepResult(outcome, "abandoned: the webhook did not answer in time")
        if "error" in result:
            return StepResult(FAILED, f"webhook failed: {request_failure(result['exception'], timeout)}")
        status = result["value"]
        if 200 <= status < 300:
            return StepResult(OK, f"HTTP {status}")
        return StepResult(FAILED, f"webhook answered HTTP {status}")


def request_failure(exc: BaseException, timeout: Optional[float] = None) -> str:
    """What went wrong with an outbound request, said without its URL (whose query or credentials
    may hold a secret, and which requests' messages repeat): refused, timed out, name not
    resolved, reset, TLS, proxy; else the exception's class."""
    import requests

    within = f" within {timeout:g} s" if timeout is not None else ""
    if isinstance(exc, requests.exceptions.ConnectTimeout):
        return f"no connection{within} (timeout)"
    if isinstance(exc, requests.exceptions.Timeout):
        return f"no answer{within} (timeout)"
    if isinstance(exc, requests.exceptions.SSLError):
        return "TLS handshake failed"
    if isinstance(exc, requests.exceptions.ProxyError):
        return "the proxy refused or failed"
    causes = _causes(exc)
    for kind, said in ((ConnectionRefusedError, "connection refused"), (ConnectionResetError, "connection reset"),
                       (ConnectionAbortedError, "connection aborted")):
        if any(isinstance(c, kind) for c in causes):
            return said
    if any(type(c).__name__ in ("gaierror", "NameResolutionError") for c in causes):
        return "host name not resolved"
    if isinstance(exc, requests.exceptions.ConnectionError):
        return "cannot connect"
    return exc.__class__.__name__


def _causes(exc: BaseException) -> List[BaseException]:
    """`exc` and what it wraps (cause, context, urllib3's `reason`, exceptions in `args`), bounded."""
    seen: List[BaseException] = []
    todo = [exc]
    while todo and len(seen) < 20:
        current = todo.pop()
        if any(current is s for s in seen):
            continue
        seen.append(current)
        nested = [current.__cause__, current.__context__, getattr(current, "reason", None), *current.args]
        todo += [n for n in nested if isinstance(n, BaseException)]
    return seen

