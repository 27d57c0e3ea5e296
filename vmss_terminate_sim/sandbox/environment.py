"""The sandbox: a local ARM endpoint and one IMDS per instance, linked the way Azure links them.

    with Sandbox(SandboxConfig(instances=4, speed=60)) as sb:
        sb.connection()   # the control plane's Connection, with the sandbox's own credential
        sb.env()          # for a child process: VMSS_TERMINATE_ARM_ENDPOINT, AZURE_SUBSCRIPTION_ID, IDENTITY_*
        sb.imds_urls()    # {"myvmss_0": "http://127.0.0.1:PORT", ...}
        ...               # run the control plane and agents against them
        sb.report()       # what happened to every deleted instance, and why

Deleting instances through ARM (scale-in by sku.capacity, POST .../delete, DELETE .../virtualMachines/{id})
calls the ARM state's `deleter`, which hands each instance to the `DeletionScheduler` with the
timeout of the model *that instance* runs. The scheduler publishes the Terminate event in the shared
placement group (every instance's IMDS shows it), applies Azure's approval rules, and when the deletion
completes the sandbox removes the instance from ARM and stops its IMDS server.
"""

from __future__ import annotations

import copy
import json
import logging
import threading
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any, Dict, List, NamedTuple, Optional

from vmss_terminate.clock import Clock, ScaledClock
from vmss_terminate.control import body
from vmss_terminate.control.connection import Connection
from vmss_terminate.control.names import check_resource_group, check_scale_set_name
from vmss_terminate.control.profile import parse_scheduled_events_profile
from vmss_terminate.errors import AzureError, InvalidValue
from vmss_terminate.scheduled_events import DEFAULT_SUBSCRIPTION
from vmss_terminate.timeout import parse_timeout, to_iso
from vmss_terminate_sim.emulator.arm.app import ArmServers, ArmState, InstanceRecord, ScaleSetRecord, start_arm
from vmss_terminate_sim.emulator.imds.app import ImdsEmulator, PlacementGroup
from vmss_terminate_sim.emulator.server import EmulatorServer
from vmss_terminate_sim.sandbox.scheduler import Deletion, DeletionScheduler
from vmss_terminate_sim.sandbox.timeline import Timeline

log = logging.getLogger(__name__)

MAX_INSTANCES = 100
WINDOWS_PROFILE = {"storageProfile": {
    "osDisk": {"osType": "Windows", "createOption": "FromImage"},
    "imageReference": {"publisher": "MicrosoftWindowsServer", "offer": "WindowsServer", "sku": "2022-datacenter",
                       "version": "latest"}}}
"""`SandboxConfig.windows`: the model of a Windows scale set (its instances take RunPowerShellScript)."""
PUBLISHING_POLICY = {"scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}}}
"""`SandboxConfig.publish_events`: the set's events reach Resource Graph (for the central handler)."""

class AccessToken(NamedTuple):
    """What azure-core expects of `get_token` (its own AccessToken's fields)."""

    token: str
    expires_on: int


class TokenEndpointCredential:
    """An azure-core TokenCredential asking one App Service-style managed-identity endpoint (the
    sandbox's) for tokens, with the request azure-identity's managed-identity credential sends.
    Why not DefaultAzureCredential: it finds the endpoint only in `os.environ` (at every token
    request), and the sandbox never changes the process environment; the printed `env()` is how
    the real credential chain reaches the sandbox from another process."""

    def __init__(self, endpoint: str, secret: str, timeout_s: float = 10.0) -> None:
        self.endpoint, self._secret, self._timeout_s = endpoint, secret, timeout_s

    def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
        resource = scopes[0][: -len("/.default")] if scopes[0].endswith("/.default") else scopes[0]
        query = urllib.parse.urlencode({"api-version": "2019-08-01", "resource": resource})
        request = urllib.request.Request(f"{self.endpoint}?{query}", headers={"X-IDENTITY-HEADER": self._secret})
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: never a proxy
        try:
            with opener.open(request, timeout=self._timeout_s) as answer:
                body = json.loads(answer.read())
            return AccessToken(str(body["access_token"]), int(body["expires_on"]))
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise AzureError(f"the sandbox token endpoint gave no token for {resource}: {exc}") from None

    def close(self) -> None:
        """Nothing to release (one request per token); here because credentials are closed."""


@dataclass(frozen=True)
class SandboxConfig:
    """What the sandbox creates. Times are sandbox seconds unless named otherwise.

    timeout_minutes  the scale set's notBeforeTimeout; None = created without the feature
    speed            sandbox seconds per real second (60: PT5M passes in 5 s)
    delete_duration  from the deletion starting (event Started) to the instance being gone
    port_base        0: free ports; else ARM on port_base, token endpoint +1, IMDS +2, +3, ...
    """

    instances: int = 4
    timeout_minutes: Optional[int] = None
    speed: float = 60.0
    name: str = "myvmss"
    resource_group: str = "sandbox-rg"
    subscription: str = DEFAULT_SUBSCRIPTION
    location: str = "westus"
    host: str = "127.0.0.1"
    port_base: int = 0
    delete_duration: float = 30.0
    imds_rate_limit: Optional[float] = 5.0
    windows: bool = False  # a Windows image (Run Command takes RunPowerShellScript)
    publish_events: bool = False  # scheduledEventsPolicy publishes to Event Grid and Resource Graph (central)

    def validated(self) -> "SandboxConfig":
        check_resource_group(self.resource_group)  # the names Azure would accept, as `enable` checks them
        check_scale_set_name(self.name)
        if not 1 <= self.instances <= MAX_INSTANCES:
            raise InvalidValue("instances", self.instances, f"expected 1..{MAX_INSTANCES}")
        if not self.speed > 0:
            raise InvalidValue("speed", self.speed, "expected a positive factor (60 = a minute per second)")
        if self.timeout_minutes is not None:
            parse_timeout(self.timeout_minutes)  # the one 5..15-minute rule (InvalidTimeout is a UsageError)
        if self.port_base and not 1024 <= self.port_base <= 65535 - self.instances - 2:
            raise InvalidValue("port_base", self.port_base, f"expected 1024..{65535 - self.instances - 2}")
        if self.delete_duration < 0:
            raise InvalidValue("delete_duration", self.delete_duration, "must be >= 0")
        return self


def notification_timeout(applied_profile: Optional[Dict[str, Any]]) -> Optional[float]:
    """Seconds of notice the model an instance runs gives, or None when it publishes no Terminate event.

    Uses the control plane's reading of the profile, so "enabled" means the same thing on both sides.
    """
    minutes = parse_scheduled_events_profile(applied_profile).effective_minutes
    return None if minutes is None else minutes * 60.0


class Sandbox:
    """ARM + token endpoint + one IMDS per instance + the deletion scheduler, on one clock."""

    def __init__(self, config: SandboxConfig = SandboxConfig(), clock: Optional[Clock] = None,
                 timeline: Optional[Timeline] = None) -> None:
        self.config = config.validated()
        self.clock: Clock = clock if clock is not None else ScaledClock(speed=self.config.speed)
        self.timeline = timeline if timeline is not None else Timeline(self.clock)
        self.state = ArmState(clock=self.clock, location=self.config.location)
        self.group = PlacementGroup(clock=self.clock, started_ttl=max(self.config.delete_duration, 1.0),
                                    auto_start=False)
        self.scheduler = DeletionScheduler(
            self.group, clock=self.clock, timeline=self.timeline,
            delete_duration=self.config.delete_duration, on_deleted=self._complete_deletion,
        )
        self.scale_set: Optional[ScaleSetRecord] = None
        self.arm: Optional[ArmServers] = None
        self._imds: Dict[str, EmulatorServer] = {}  # vm name -> its IMDS server
        self._imds_gone: Dict[str, threading.Event] = {}
        self._stoppers: List[threading.Thread] = []
        self._next_port = self.config.port_base + 2 if self.config.port_base else 0
        self._lock = threading.RLock()

    # -- lifecycle -------------------------------------------------------------------------------

    def start(self) -> "Sandbox":
        cfg = self.config
        profile = None
        if cfg.timeout_minutes is not None:
            profile = {"terminateNotificationProfile": body.profile(True, cfg.timeout_minutes)}
        self.state.add_listener(self._on_arm_change)
        self.scale_set = self.state.add_scale_set(
            cfg.subscription, cfg.resource_group, cfg.name, orchestration="Uniform", upgrade_policy="Manual",
            capacity=cfg.instances, scheduled_events_profile=profile, location=cfg.location,
            vm_profile=copy.deepcopy(WINDOWS_PROFILE) if cfg.windows else None,
            extra_properties={"scheduledEventsPolicy": copy.deepcopy(PUBLISHING_POLICY)} if cfg.publish_events else None,
        )
        self.state.deleter = self._on_delete
        # ARM sees the same events: maintenanceresources rows (when the set's policy publishes them)
        # and the Maintenance RP's acknowledge, which the scheduler reads like an IMDS approval
        self.state.maintenance.attach(self.scale_set, self.group)
        try:
            self.arm = start_arm(self.state, host=cfg.host, port=cfg.port_base,
                                 token_port=cfg.port_base + 1 if cfg.port_base else 0)
            for instance in list(self.scale_set.instances.values()):
                self._serve_imds(instance)
            self.scheduler.start()
        except BaseException:
            self.stop()
            raise
        self.timeline.record(
            "sandbox", "sandbox_started", "",
            f"scale set {cfg.name}: {cfg.instances} instances, Manual upgrade policy, "
            + (f"terminate notification {to_iso(cfg.timeout_minutes)}" if cfg.timeout_minutes is not None
               else "no terminate notification")
            + f"; clock x{self.speed:g}",
        )
        return self

    def stop(self) -> None:
        """Stop everything; servers stop in parallel (each waits up to half a second for its loop)."""
        self.scheduler.stop()
        with self._lock:
            servers = list(self._imds.values())
            self._imds.clear()
            stoppers = list(self._stoppers)
        if self.arm is not None:
            servers += [self.arm.arm_server, self.arm.token_server]
            self.arm = None
        for server in servers:
            stopper = threading.Thread(target=server.stop, daemon=True, name=f"stop:{server.port}")
            stopper.start()
            stoppers.append(stopper)
        for stopper in stoppers:
            stopper.join(timeout=5)

    def __enter__(self) -> "Sandbox":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()

    # -- what users point things at ------------------------------------------------------------

    @property
    def speed(self) -> float:
        return float(self.clock.speed)

    def _servers(self) -> ArmServers:
        if self.arm is None:
            raise RuntimeError("the sandbox is not running: call start() first")
        return self.arm

    @property
    def arm_url(self) -> str:
        return self._servers().arm_url

    def env(self) -> Dict[str, str]:
        """Environment that points the CLI (`enable`, `status`, ...) and the Azure SDK at this sandbox."""
        arm = self._servers()
        env = {"VMSS_TERMINATE_ARM_ENDPOINT": arm.arm_url, "AZURE_SUBSCRIPTION_ID": self.config.subscription}
        env.update(arm.env)
        return env

    def connection(self, **overrides: Any) -> Connection:
        """The control plane's Connection to this sandbox, with `credential()` (no environment needed)."""
        overrides.setdefault("subscription_id", self.config.subscription)
        overrides.setdefault("arm_endpoint", self.arm_url)
        overrides.setdefault("credential", self.credential())
        return Connection(**overrides)

    def credential(self) -> "TokenEndpointCredential":
        """A credential for this sandbox's token endpoint, handed to the control plane explicitly
        (`connection()` carries it): nothing reads or changes the process environment. A child
        process gets `env()` instead, where the real DefaultAzureCredential finds the endpoint."""
        env = self._servers().env
        return TokenEndpointCredential(env["IDENTITY_ENDPOINT"], env["IDENTITY_HEADER"])

    def imds_urls(self) -> Dict[str, str]:
        """Live instances' IMDS base URLs (VMSS_TERMINATE_IMDS_URL of each), by VM name."""
        with self._lock:
            return {name: server.url for name, server in sorted(self._imds.items(), key=_vm_order)}

    def _scale_set(self) -> ScaleSetRecord:
        if self.scale_set is None:
            raise RuntimeError("the sandbox is not running: call start() first")
        return self.scale_set

    def vm_names(self) -> List[str]:
        """Instances still in the scale set (including those being deleted), in instance-id order."""
        scale_set = self._scale_set()
        with self.state.lock:
            return sorted((i.name for i in scale_set.instances.values()), key=_name_order)

    def wait_imds_gone(self, vm_name: str, wait_seconds: float) -> bool:
        """Block (at most `wait_seconds` real seconds) until the deleted instance's IMDS stopped answering."""
        with self._lock:
            gone = self._imds_gone.setdefault(vm_name, threading.Event())
        return gone.wait(wait_seconds)

    def instance(self, vm_name: str) -> Optional[InstanceRecord]:
        scale_set = self._scale_set()
        with self.state.lock:
            return next((i for i in scale_set.instances.values() if i.name == vm_name), None)

    # -- the links between ARM and IMDS -----------------------------------------------------------

    def _on_delete(self, scale_set: ScaleSetRecord, instances: List[InstanceRecord]) -> None:
        """ARM's deleter: each instance gets a Terminate event with its own model's timeout (or none)."""
        for instance in instances:
            with self.state.lock:
                notice_s = notification_timeout(instance.applied_profile)
                latest = instance.latest_model_applied
            if not latest:
                self.timeline.record(
                    "sandbox", "stale_model", instance.name,
                    "runs an older model than the scale set (not upgraded): "
                    + ("no terminate notification" if notice_s is None else f"its timeout is {notice_s / 60:.0f} min"),
                )
            self.scheduler.request(scale_set.resource_id.lower(), instance.instance_id, instance.name, notice_s)

    def _complete_deletion(self, deletion: Deletion) -> None:
        self.state.remove_instances(self._scale_set(), [deletion.instance_id])
        with self._lock:
            server = self._imds.pop(deletion.vm_name, None)
            gone = self._imds_gone.setdefault(deletion.vm_name, threading.Event())
        if server is None:
            gone.set()
            return
        # Stopping a server waits for its accept loop (up to half a second): do it aside, so the
        # scheduler keeps its pace; `wait_imds_gone` tells when the address stopped answering.
        stopper = threading.Thread(target=_stop_then_set, args=(server, gone), daemon=True,
                                   name=f"imds-stop:{deletion.vm_name}")
        stopper.start()
        with self._lock:
            self._stoppers.append(stopper)

    def _on_arm_change(self, kind: str, scale_set: ScaleSetRecord, instances: List[InstanceRecord]) -> None:
        if kind == "added" and scale_set is self.scale_set:
            for instance in instances:
                self._serve_imds(instance)
                self.timeline.record("sandbox", "instance_added", instance.name, "scale-out: new instance")
        elif kind == "upgraded" and scale_set is self.scale_set:
            names = ", ".join(sorted((i.name for i in instances), key=_name_order))
            self.timeline.record("sandbox", "instances_upgraded", "", f"now on the latest model: {names}")
        elif kind == "model_changed" and scale_set is self.scale_set:
            with self.state.lock:
                profile = scale_set.scheduled_events_profile
            notice_s = notification_timeout(profile)
            what = "no terminate notification" if notice_s is None else f"terminate notification {notice_s / 60:.0f} min"
            self.timeline.record("sandbox", "model_changed", "", f"scale set model changed: {what}")

    def _serve_imds(self, instance: InstanceRecord) -> None:
        cfg = self.config
        app = ImdsEmulator(
            self.group, vm_name=instance.name, vmss_name=cfg.name, resource_id=instance.resource_id,
            rate_limit=cfg.imds_rate_limit, subscription_id=cfg.subscription, resource_group=cfg.resource_group,
            location=cfg.location,
        )
        with self._lock:
            port = self._next_port
            if self._next_port:
                self._next_port += 1
            self._imds[instance.name] = EmulatorServer(app, host=cfg.host, port=port).start()

    # -- the story so far -------------------------------------------------------------------------

    def report(self) -> List[str]:
        """One line per deleted (or pending) instance explaining what happened and why."""
        origin = self.timeline.sandbox_start
        return [d.explain(origin) for d in self.scheduler.deletions()]


def _stop_then_set(server: EmulatorServer, done: threading.Event) -> None:
    try:
        server.stop()
    finally:
        done.set()


def _name_order(name: str) -> Any:
    suffix = name.rsplit("_", 1)[-1]
    return (0, int(suffix), name) if suffix.isdigit() else (1, 0, name)


def _vm_order(item: Any) -> Any:
    return _name_order(item[0])
