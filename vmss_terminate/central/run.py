"""`central run` as a library call: build the handler for a scope from a connection and options,
with Resource Graph as the source, and run it (`run_central`), or handle one event (`handle_event`).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from vmss_terminate.central.graph import ResourceGraphSource, ScaleSetDirectory, ScaleSetInfo, resolve_subscriptions
from vmss_terminate.central.handler import Actions, CentralHandler, HandlerConfig, Outcome
from vmss_terminate.central.maintenance import MaintenanceClient
from vmss_terminate.central.runcommand import RunCommandClient
from vmss_terminate.central.source import CentralEvent, EventSource, ScaleSetRef
from vmss_terminate.clock import SYSTEM_CLOCK, Clock
from vmss_terminate.control.connection import Connection
from vmss_terminate.errors import UsageError
from vmss_terminate.fleet.scope import Scope
from vmss_terminate.fleet.session import FleetSession
from vmss_terminate.pipeline.journal import StateStore

log = logging.getLogger(__name__)


@dataclass
class Central:
    """A built handler and what it owns (closed together)."""

    handler: CentralHandler
    session: FleetSession
    directory: ScaleSetDirectory

    def close(self) -> None:
        self.handler.stop()
        if self.handler.notifier is not None:  # chat notices still queued are sent (bounded)
            self.handler.notifier.close()
        self.session.close()


def build(scope: Scope, config: HandlerConfig, *, connection: Optional[Connection] = None,
          scale_set_ids: Sequence[str] = (), state_file: Optional[str] = None, kubeconfig: Optional[str] = None,
          source: Optional[EventSource] = None, clock: Clock = SYSTEM_CLOCK,
          session: Optional[FleetSession] = None, observe: Any = None) -> Central:
    """The handler over `scope` (Resource Graph unless another `source` is given)."""
    session = session or FleetSession(connection, clock)
    subscriptions = resolve_subscriptions(session, scope)
    wanted = {ScaleSetRef.parse(i).key for i in scale_set_ids}
    directory = ScaleSetDirectory(session, scope, subscriptions, clock)
    maintenance = MaintenanceClient(session)

    def lookup(refs: Sequence[ScaleSetRef]) -> Dict[str, ScaleSetInfo]:
        directory.refresh(refs)
        found = {}
        for ref in refs:
            info = directory.lookup(ref)
            if info is not None and (not wanted or ref.key in wanted):
                found[ref.key] = info
        return found

    journal = StateStore(state_file) if state_file else StateStore()
    runner = RunCommandClient(session, config.run_command, clock) if config.run_command else None
    drain = None
    if config.kubernetes:
        from vmss_terminate.pipeline.kubernetes.api import KubeApi
        from vmss_terminate.pipeline.kubernetes.credentials import load_access
        from vmss_terminate.pipeline.kubernetes.drain import NodeDrain, listed_vms

        api = KubeApi(load_access(kubeconfig))

        def drain(journal: StateStore, report: Callable[..., None], live: Callable[[str], bool]) -> NodeDrain:
            return NodeDrain(api, journal, report, listed_vms, clock, lambda: "vmss-terminate-central", live=live)

    handler = CentralHandler(
        source or ResourceGraphSource(session, scope, subscriptions), lookup, maintenance.acknowledge, config,
        journal, Actions(runner.run if runner is not None else None, drain), clock, observe)
    central = Central(handler, session, directory)
    if session.throttle.stop is None:  # a wait for Resource Graph's quota (or a 429) ends when the handler stops
        session.throttle.stop = central.handler.stopping
    return central


def read_script(path: Optional[str]) -> Optional[str]:
    """`--run-command FILE`'s content (UsageError naming the file when it cannot be read)."""
    if path is None:
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            text = handle.read()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"invalid --run-command {path!r}: {exc.strerror if isinstance(exc, OSError) else exc}") \
            from None
    if not text.strip():
        raise UsageError(f"invalid --run-command {path!r}: the file is empty")
    return text


def handle_event(event: CentralEvent, config: HandlerConfig, *, connection: Optional[Connection] = None,
                 state_file: Optional[str] = None, kubeconfig: Optional[str] = None,
                 clock: Clock = SYSTEM_CLOCK) -> Outcome:
    """The Python API for one event: its scale set read (the scope is that set), the actions run,
    then the acknowledgement. For a serverless function fed by Event Grid."""
    scope = Scope.build(subscriptions=[event.scale_set.subscription], resource_groups=[event.scale_set.resource_group])
    central = build(scope, config, connection=connection, scale_set_ids=[event.scale_set.id], state_file=state_file,
                    kubeconfig=kubeconfig, clock=clock)
    try:
        infos = central.handler.lookup([event.scale_set])
        info = infos.get(event.scale_set.key)
        if info is None:
            raise UsageError(f"scale set {event.scale_set.id} was not found (or its row could not be read): "
                             "its event is not handled")
        return central.handler.handle(event, info)
    finally:
        central.close()


def summary(outcomes: List[Outcome]) -> List[Tuple[str, str]]:
    return [(o.event.event_id, "acknowledged" if o.acknowledged and o.acknowledged.ok else o.withheld or "refused")
            for o in outcomes]


def handled_types(text: str) -> Tuple[str, ...]:
    """`--type Terminate,Reboot` -> the types handled (UsageError for unknown names or none)."""
    from vmss_terminate.pipeline.events import parse_types

    types = tuple(parse_types(text))
    if not types:
        raise UsageError("--type: name at least one event type to handle")
    return types
