"""Start a set of IMDS emulators sharing one placement group: the Python API behind
`vmss-terminate emulator imds`, also handy for scripts and the sandbox.

One HTTP server per VM name, all over one `PlacementGroup` (one event list), as the VMs of a
scale-set placement group see it. Events can be seeded from `TYPE:VM[,VM][@SECONDS]` specs or a
JSON scenario file in the admin endpoint's keys.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence

from vmss_terminate.errors import UsageError
from vmss_terminate.params import shown, strict_decimal
from vmss_terminate_sim.emulator.imds.app import EVENT_TYPES, EmulatedEvent, ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.imds.events import check_not_before_in, event_fields_from_mapping
from vmss_terminate_sim.emulator.server import EmulatorServer, RunningServers, stop_servers


def parse_event_spec(spec: str) -> Dict[str, Any]:
    """`TYPE:VM[,VM...][@SECONDS]` -> add_event kwargs, e.g. `Terminate:myvmss_1` or `Freeze:a,b@60`."""
    text, _, delay = spec.partition("@")
    event_type, sep, vms = text.partition(":")
    matched = next((t for t in EVENT_TYPES if t.lower() == event_type.strip().lower()), None)
    resources = [v.strip() for v in vms.split(",") if v.strip()]
    if not sep or matched is None or not resources:
        raise UsageError(
            f"invalid --event {spec!r}: use TYPE:VM[,VM...][@SECONDS], TYPE one of {', '.join(EVENT_TYPES)}"
        )
    fields: Dict[str, Any] = {"event_type": matched, "resources": resources}
    if delay:
        seconds = strict_decimal(delay)  # ASCII digits, bounded: no nan, inf or full-width digits
        if seconds is None:
            raise UsageError(f"invalid --event {shown(spec)}: @SECONDS must be a number such as 60")
        fields["not_before_in"] = check_not_before_in(seconds, "--event @SECONDS")
    return fields


def load_scenario(path: str) -> List[Dict[str, Any]]:
    """A JSON file: a list of events, or {"Events": [...]}, each in the admin endpoint's keys."""
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except OSError as exc:
        raise UsageError(f"cannot read scenario {path}: {exc.strerror}") from None
    except ValueError as exc:
        raise UsageError(f"scenario {path} is not valid JSON: {exc}") from None
    except RecursionError:  # a document nested deeper than the parser's stack
        raise UsageError(f"scenario {path} is not valid JSON: nested too deeply") from None
    events = data.get("Events", data.get("events")) if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise UsageError(f"scenario {path}: expected a list of events or {{\"Events\": [...]}}")
    return [event_fields_from_mapping(item) for item in events]


@dataclass
class ImdsServers(RunningServers):
    """Running IMDS emulators over one placement group, one server per VM (in `vm_names` order).
    Stop with `stop()` or use as a context manager."""

    group: PlacementGroup
    servers: List[EmulatorServer]

    @property
    def urls(self) -> List[str]:
        """Each VM's IMDS base URL (what VMSS_TERMINATE_IMDS_URL / `--imds-url` take)."""
        return [server.url for server in self.servers]

    def url_of(self, vm_name: str) -> str:
        """The base URL of the server that answers as `vm_name`."""
        for server in self.servers:
            if isinstance(server.app, ImdsEmulator) and server.app.vm_name == vm_name:
                return server.url
        raise KeyError(vm_name)

    def stop(self) -> None:
        stop_servers(self.servers)


def start_imds(
    vm_names: Sequence[str],
    host: str = "127.0.0.1",
    port: int = 0,
    vmss_name: Optional[str] = None,
    first_call_delay: float = 0.0,
    rate_limit: Optional[float] = 5.0,
    started_ttl: float = 60.0,
    auto_start: bool = True,
    events: Sequence[Dict[str, Any]] = (),
    listener: Optional[Callable[[str, EmulatedEvent], None]] = None,
) -> ImdsServers:
    """The Python API behind the command: one group, one started server per VM (ports port, port+1, ...).

    `events` are `add_event` kwargs (a `not_before_in` key counts seconds from now); `listener` is
    registered before they are added.
    """
    if not vm_names:
        raise UsageError("give at least one --vm-name")
    if not all(name.strip() for name in vm_names):
        raise UsageError("--vm-name must not be empty")
    if port and port + len(vm_names) - 1 > 65535:
        raise UsageError(f"--port {port} leaves no room for {len(vm_names)} servers (ports {port}..)")
    if len(set(vm_names)) != len(vm_names):
        raise UsageError("each --vm-name must be different")
    group = PlacementGroup(started_ttl=started_ttl, auto_start=auto_start)
    if listener is not None:
        group.add_listener(listener)
    servers: List[EmulatorServer] = []
    try:
        for index, name in enumerate(vm_names):
            app = ImdsEmulator(group, vm_name=name, vmss_name=vmss_name, rate_limit=rate_limit,
                               first_call_delay=first_call_delay)
            servers.append(EmulatorServer(app, host=host, port=port + index if port else 0).start())
        for fields in events:
            fields = dict(fields)
            if "not_before_in" in fields:
                fields["not_before"] = group.clock.now() + fields.pop("not_before_in")
            group.add_event(**fields)
    except BaseException as exc:
        for server in servers:
            server.stop()
        if isinstance(exc, OSError):
            raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        raise
    return ImdsServers(group, servers)
