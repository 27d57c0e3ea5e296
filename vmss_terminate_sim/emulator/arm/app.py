"""Local Azure Resource Manager for VM scale sets, faithful enough that azure-mgmt-compute runs
unchanged against it, plus a managed-identity token endpoint for DefaultAzureCredential.

    with start_arm(seed="examples/seed.json") as arm:      # ARM + token endpoint on loopback
        os.environ.update(arm.env)                          # IDENTITY_ENDPOINT / IDENTITY_HEADER
        client = ComputeManagementClient(DefaultAzureCredential(), SUB, base_url=arm.arm_url,
                                         polling_interval=0,
                                         per_call_policies=[allow_loopback_http_policy()])

Pointing the real SDK at it (azure-mgmt-compute 39, azure-core 1.41, azure-identity 1.27):
  * credential: `DefaultAzureCredential()` with `arm.env` in os.environ (App Service managed identity;
    `ManagedIdentityCredential` picks it up; scope https://management.azure.com/.default as usual).
  * `base_url=arm.arm_url`; keep the default credential scopes.
  * plain http: azure-core's BearerTokenCredentialPolicy refuses bearer tokens over http unless
    `request.context.options["enforce_https"] = False` reaches it. Either pass `enforce_https=False`
    to every operation call (it is also forwarded to LRO polling), or add a tiny per-call policy --
    `per_call_policies=[p]` on the client constructor, prepended before authentication -- whose
    `on_request` sets `request.context["enforce_https"] = False` only when the URL is http on a
    loopback host (`vmss_terminate.control.pipeline.allow_loopback_http_policy()`, which asks
    `vmss_terminate.net.is_loopback_http`). Or serve ARM over HTTPS (`start_arm(ssl_context=...)`,
    e.g. a `trustme` CA) and pass `connection_verify=CA_PATH` to the client.
  * `polling_interval=0` (client or call) so LROs poll without the 30 s default wait.
  * `api_version="2019-03-01"` per operation call reaches the wire; the client default is 2026-04-01.

What the emulator answers (ARM error bodies are always {"error": {"code", "message"}}):
  * auth: `Authorization: Bearer <JWT signed by our TokenEndpoint, not expired>` for an audience
    public ARM accepts (ARM_AUDIENCES, trailing slash and case ignored) or for the emulator's own
    URL (`own_endpoints`: what `<resourceManager>.default` from the cloud metadata asks for), else
    401 (AuthenticationFailed / InvalidAuthenticationToken / ExpiredAuthenticationToken /
    InvalidAuthenticationTokenAudience).
  * `api-version` is required (400 MissingApiVersionParameter / InvalidApiVersionParameter).
  * routes: `ArmEmulator.routes`, one explicit table (method + path pattern -> handler); a path
    served for other methods answers 405, an unknown path 404.
  * GET /subscriptions (paged like VM lists) and GET /subscriptions/{id}: Microsoft.Resources'
    shape with the display name and tenant the seed gives (`state.add_subscription`); every
    subscription a scale set names is listed too.
  * GET /subscriptions/{id}/resourcegroups (paged) and GET/HEAD .../resourcegroups/{rg}:
    Microsoft.Resources' shape (id, name, type, location, tags when set, properties.provisioningState);
    404 ResourceGroupNotFound for an unknown group (HEAD: 404 without a body).
  * GET /metadata/endpoints (no token, any api-version; `//` tolerated): the cloud metadata
    document `az cloud register --endpoint-resource-manager` reads, naming only the emulator's
    own endpoints (ARM; the token endpoint as loginEndpoint) and Azure's ARM audiences.
  * GET/PUT/PATCH .../virtualMachineScaleSets/{name}: names are case-insensitive. PATCH merges the
    objects it carries (null = unchanged), answers 200 with provisioningState Updating and an
    Azure-AsyncOperation header; PUT replaces the model (201 when it creates) under putrules.py's
    rules: unknown members 400, create-time properties 409 PropertyChangeNotAllowed, and what an
    omitted property means (kept: storageProfile.imageReference -- az drops it on purpose -- and
    whole storage/os/network sections, orchestrationMode, platformFaultDomainCount,
    singlePlacementGroup; reset: tags, overprovision, other properties and profile members).
    Bodies are complete models (defaults.py).
  * a terminateNotificationProfile without `enable` in a PUT/PATCH body is stored `enable: true`
    (Azure's recorded answer to `az vmss update --terminate-notification-time N`).
  * scheduledEventsProfile in a PUT/PATCH body with api-version < 2019-03-01: 400 BadRequest
    "Could not find member 'scheduledEventsProfile' on object of type 'VirtualMachineProfile'. ...";
    a GET at such a version omits it. notBeforeTimeout must be PT5M..PT15M (400 InvalidParameter).
  * properties.scheduledEventsPolicy (eventspolicy.py): stored, merged by PATCH, replaced by PUT and
    returned per api-version (none below 2024-03-01; allInstancesDown and scheduledEventsApiVersion
    from 2025-04-01); a body carrying a member its api-version lacks: 400 BadRequest "Could not find
    member 'X' on object of type 'T'. Path '...'." A policy change is not a model change (no
    instance goes stale). `ScaleSetRecord.publishes_to_event_grid` says whether a set publishes.
  * Microsoft.Features: GET .../providers/Microsoft.Features/providers/{ns}/features/{name}
    (Features_Get, any api-version) answers `Registered` unless the seed's `unregisteredFeatures`,
    `--unregistered-feature NAME` or `state.set_feature(name, False)` says `NotRegistered`;
    POST .../register and .../unregister (what `az feature register` sends) change it at once.
  * enable:false is stored and returned as `"scheduledEventsProfile": {}`; a scale set that never had
    the feature has no key at all. Re-enabling after a disable works (the GET shows it) unless
    `state.reenable_ignored` is set, which reproduces azure-docs#41434 (2019): the re-enable is
    accepted (200, LRO Succeeded) but ignored unless something else in virtualMachineProfile changes.
  * GET .../virtualMachines/{id}/instanceView, and `$expand=instanceView` on the VM list and get;
    GET .../virtualMachineScaleSets/{name}/instanceView (statuses and per-state instance counts).
  * GET .../virtualMachines: Uniform only, paged (`state.page_size`, nextLink with $skiptoken).
    Flexible: 409 OperationNotAllowed -- Flexible members are standalone VMs; list them with
    GET .../resourceGroups/{rg}/providers/Microsoft.Compute/virtualMachines (each carries
    properties.virtualMachineScaleSet.id; no latestModelApplied there).
  * POST .../manualupgrade {"instanceIds": [...]} (required, 400 otherwise; "*" = all instances,
    as az documents, also for POST .../delete): 202 + Azure-AsyncOperation
    + Location; the status goes InProgress (for `state.lro_polls` polls) -> Succeeded, then the
    instances run the current model. Flexible accepts VM names as instance ids.
  * POST .../delete {"instanceIds": [...]}, DELETE .../virtualMachines/{id}, and lowering
    sku.capacity delete instances via `state.deleter` (see arm_state). LRO 202 as above; a delete LRO
    with a deleter stays InProgress until the instances are removed.
  * LRO status: GET /subscriptions/{sub}/providers/Microsoft.Compute/locations/{loc}/operations/{id}
    -> {"status": "InProgress"|"Succeeded"|"Failed", "error": {...}}; with `monitor=true` (the Location
    URL) 202 while in progress, 200 when done, 500 + error when failed. No Retry-After unless
    `ArmEmulator.retry_after` is set (`start_arm(lro_retry_after=S)`, `--lro-retry-after S`: an
    emulator convenience for clients that wait 30 s between polls, like az), so the SDK polls at
    its own `polling_interval`.
  * faults: `server.faults` (429 + Retry-After, 500, delays, garbage) per request; LRO-level
    `state.fail_next_lro(code, message, kind=None)` and `state.fail_manualupgrade(nth, ...)`.

Decisions where the reference is silent:
  * PUT/PATCH apply the model at once (the answer and GETs already show it, provisioningState
    Updating); the LRO only flips provisioningState to Succeeded. A failed PATCH LRO keeps the new
    model with provisioningState Failed (what Azure shows after a failed update).
  * In a PATCH, `null` leaves a value unchanged (Compute's PATCH, not RFC 7386 deletion); tags replace.
  * notBeforeTimeout is stored as sent (PT600S stays PT600S); an enabled profile without
    notBeforeTimeout means Azure's documented default PT5M -- the emulator does not add it.
  * Instance ids are never reused by the emulator (Azure may reuse them; clients must not care).
  * Flexible: manualupgrade and POST .../delete take VM names as instance ids (the Flexible instance
    id is the VM name); scale-in removes the newest VMs.
  * The token endpoint is http only (like App Service's); ARM may be HTTPS (`ssl_context`, or
    `--tls-cert/--tls-key` on the CLI).
"""

from __future__ import annotations

import copy
import math
import re
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple, TypeVar, Union
from urllib.parse import quote, urlencode

from vmss_terminate.clock import Clock
from vmss_terminate.timeout import MAX_MINUTES, MIN_MINUTES, iso_to_minutes_lenient
from vmss_terminate_sim.emulator.arm import (
    answer_faults,
    defaults,
    eventspolicy,
    maintenance,
    putrules,
    quota,
    resourcegraph,
    runcommand,
    shapes,
)
from vmss_terminate_sim.emulator.arm.inventory import (
    UPGRADE_POLICIES,
    ArmState,
    ArmStateError,
    InstanceRecord,
    Operation,
    ResourceGroupRecord,
    ScaleSetRecord,
)
from vmss_terminate_sim.emulator.arm.token import (
    ARM_AUDIENCES,
    TokenEndpoint,
    credential_env,
    endpoint_aliases,
    identity_endpoint,
)
from vmss_terminate_sim.emulator.routes import Route, match_route, path_params, path_pattern
from vmss_terminate_sim.emulator.server import EmulatorServer, Request, Response, RunningServers, stop_servers

__all__ = [
    "ArmEmulator", "ArmServers", "ArmState", "InstanceRecord", "Operation", "ScaleSetRecord",
    "TokenEndpoint", "credential_env", "start_arm",
]

def _path(pattern: str) -> "re.Pattern[str]":
    return path_pattern(pattern + "/?", ignore_case=True)


_SUB = r"/subscriptions/(?P<sub>[^/]+)"
_RG = _SUB + r"/resourcegroups/(?P<rg>[^/]+)/providers/microsoft\.compute"
_VMSS = _RG + r"/virtualmachinescalesets/(?P<name>[^/]+)"
CLOUD_METADATA = _path(r"/metadata/endpoints")
SUBSCRIPTIONS = _path(r"/subscriptions")
SUBSCRIPTION = _path(_SUB)
RESOURCE_GROUPS = _path(_SUB + r"/resourcegroups")
RESOURCE_GROUP = _path(_SUB + r"/resourcegroups/(?P<rg>[^/]+)")
OPERATION = _path(_SUB + r"/providers/microsoft\.compute/locations/(?P<loc>[^/]+)/operations/(?P<op>[^/]+)")
SUB_SCALE_SETS = _path(_SUB + r"/providers/microsoft\.compute/virtualmachinescalesets")
RG_SCALE_SETS = _path(_RG + r"/virtualmachinescalesets")
SCALE_SET = _path(_VMSS)
SCALE_SET_VMS = _path(_VMSS + r"/virtualmachines")
SCALE_SET_INSTANCE_VIEW = _path(_VMSS + r"/instanceview")
SCALE_SET_VM = _path(_VMSS + r"/virtualmachines/(?P<iid>[^/]+)")
VM_INSTANCE_VIEW = _path(_VMSS + r"/virtualmachines/(?P<iid>[^/]+)/instanceview")
MANUAL_UPGRADE = _path(_VMSS + r"/manualupgrade")
DELETE_INSTANCES = _path(_VMSS + r"/delete")
STANDALONE_VMS = _path(_RG + r"/virtualmachines")
STANDALONE_VM = _path(_RG + r"/virtualmachines/(?P<vm>[^/]+)")
RESOURCE_GRAPH = _path(r"/providers/microsoft\.resourcegraph/resources")
_FEATURE = _SUB + r"/providers/microsoft\.features/providers/(?P<namespace>[^/]+)/features/(?P<feature>[^/]+)"
FEATURE = _path(_FEATURE)
FEATURE_REGISTER = _path(_FEATURE + r"/register")
FEATURE_UNREGISTER = _path(_FEATURE + r"/unregister")
_MAINTENANCE = _RG + r"/(?P<kind>virtualmachinescalesets|virtualmachines|availabilitysets)/(?P<name>[^/]+)" \
    r"/providers/microsoft\.maintenance/scheduledevents"
ACKNOWLEDGE = _path(_MAINTENANCE + r"/(?P<eid>[^/]+)/acknowledge")
ACKNOWLEDGE_LIST = _path(_MAINTENANCE)
VMSS_VM_RUN_COMMAND = _path(_VMSS + r"/virtualmachines/(?P<iid>[^/]+)/runcommand")
STANDALONE_VM_RUN_COMMAND = _path(_RG + r"/virtualmachines/(?P<vm>[^/]+)/runcommand")

_MANY_SLASHES = re.compile("/{2,}")
_Item = TypeVar("_Item")


_SUBSCRIPTION_PATH = re.compile(r"^/subscriptions/([^/]+)(?:/|$)", re.IGNORECASE)


class _Refusal(Exception):
    def __init__(self, response: Response) -> None:
        super().__init__(response.status)
        self.response = response


def _refuse(status: int, code: str, message: str, target: Optional[str] = None) -> _Refusal:
    return _Refusal(shapes.error(status, code, message, target))


class ArmEmulator:
    """The ARM app. `tokens` validates bearer tokens (a fresh TokenEndpoint when omitted)."""

    def __init__(self, state: ArmState, tokens: Optional[TokenEndpoint] = None, scheme: str = "http",
                 audiences: Tuple[str, ...] = ARM_AUDIENCES, retry_after: Optional[int] = None) -> None:
        self.state = state
        self.tokens = tokens or TokenEndpoint()
        self.scheme = scheme
        self.audiences = audiences
        self.retry_after = retry_after  # Retry-After on LRO answers; None: not sent (fast SDK polling)
        self.login_endpoint: Optional[str] = None  # the token endpoint's URL, for the cloud metadata
        # The emulator's own URL(s): accepted as a token audience like ARM's own, because clients
        # ask for `<resourceManager endpoint>/.default` taken from the cloud metadata.
        self.own_endpoints: Tuple[str, ...] = ()
        # Served without a token or api-version check, like ARM's cloud metadata.
        self.public_routes: List[Route] = [Route("GET", CLOUD_METADATA, self._cloud_metadata_get)]
        # The route table: every operation the emulator serves, in one place; each handler is
        # called as handler(request, api_version, **the pattern's named groups).
        self.routes: List[Route] = [
            Route("GET", SUBSCRIPTIONS, self._subscriptions_get),
            Route("GET", SUBSCRIPTION, self._subscription_get),
            Route("GET", RESOURCE_GROUPS, self._resource_groups_get),
            Route("GET", RESOURCE_GROUP, self._resource_group_get),
            Route("HEAD", RESOURCE_GROUP, self._resource_group_head),
            Route("GET", OPERATION, self._operation_get),
            Route("GET", SUB_SCALE_SETS, self._sub_scale_sets_get),
            Route("GET", RG_SCALE_SETS, self._rg_scale_sets_get),
            Route("GET", SCALE_SET, self._scale_set_get),
            Route("PUT", SCALE_SET, self._scale_set_put),
            Route("PATCH", SCALE_SET, self._scale_set_patch),
            Route("GET", SCALE_SET_VMS, self._vm_list_get),
            Route("GET", SCALE_SET_VM, self._vm_get),
            Route("DELETE", SCALE_SET_VM, self._vm_delete),
            Route("GET", VM_INSTANCE_VIEW, self._vm_instance_view_get),
            Route("GET", SCALE_SET_INSTANCE_VIEW, self._scale_set_instance_view_get),
            Route("POST", MANUAL_UPGRADE, self._manualupgrade_post),
            Route("POST", DELETE_INSTANCES, self._delete_instances_post),
            Route("GET", STANDALONE_VMS, self._standalone_vms_get),
            Route("GET", STANDALONE_VM, self._standalone_vm_get),
            Route("DELETE", STANDALONE_VM, self._standalone_vm_delete),
            Route("POST", RESOURCE_GRAPH, self._resource_graph_post),
            Route("GET", FEATURE, self._feature_get),
            Route("POST", FEATURE_REGISTER, self._feature_register_post),
            Route("POST", FEATURE_UNREGISTER, self._feature_unregister_post),
            Route("POST", ACKNOWLEDGE, self._acknowledge_post),
            Route("POST", ACKNOWLEDGE_LIST, self._acknowledge_list_post),
            Route("POST", VMSS_VM_RUN_COMMAND, self._vm_run_command_post),
            Route("POST", STANDALONE_VM_RUN_COMMAND, self._standalone_vm_run_command_post),
        ]

    # ------------------------------------------------------------ entry point

    def handle(self, request: Request) -> Response:
        request.path = _MANY_SLASHES.sub("/", request.path)  # az asks for //metadata/endpoints
        try:
            public = match_route(self.public_routes, request.method, request.path)
            if public.route is not None and public.match is not None:
                return public.route.handler(request, request.param("api-version"), **path_params(public.match))
            self._authenticate(request)
            api_version = request.param("api-version")
            if not api_version:
                raise _refuse(400, "MissingApiVersionParameter",
                              "The api-version query parameter (?api-version=) is required for all requests.")
            if not shapes.valid_api_version(api_version):
                raise _refuse(400, "InvalidApiVersionParameter",
                              f"The api-version '{api_version}' is invalid. An api-version looks like "
                              f"YYYY-MM-DD or YYYY-MM-DD-preview (scheduledEventsProfile needs "
                              f"{shapes.SCHEDULED_EVENTS_MIN_API} or later).")
            self.state.tick()
            if request.method not in ("GET", "HEAD") and not RESOURCE_GRAPH.match(request.path):
                self.state.changed()  # a write may change what a Resource Graph query selects
            throttled, quota_headers, repeated = self._quota(request)
            if throttled is not None:
                return throttled
            route, match = self._route(request)
            response = route.handler(request, api_version, **path_params(match))
            response.headers.update(quota_headers)
            response.repeated.extend(repeated)
            return answer_faults.apply(request, response, self._base(request))
        except _Refusal as refusal:
            return refusal.response
        except ArmStateError as exc:
            return shapes.error(exc.status, exc.code, exc.message, exc.target, details=exc.details)

    def _quota(self, request: Request) -> Tuple[Optional[Response], Dict[str, str], List[Tuple[str, str]]]:
        """Spend a token of every quota that applies (the subscription's ARM quota, Compute
        policies): a 429 when one is empty, else the remaining headers to add to the answer."""
        found = _SUBSCRIPTION_PATH.match(request.path)
        if not found:
            return None, {}, []
        decision = self.state.quotas.decide(found.group(1), quota.kind_of(request.method), request.path)
        if decision.allowed or decision.refused_by is None:
            return None, decision.headers, decision.repeated
        body = quota.throttled_body(decision.refused_by, found.group(1), decision.retry_after)
        refused = Response.json(429, body, dict(decision.headers, **{"Retry-After": str(decision.retry_after)}))
        refused.repeated = decision.repeated
        return refused, {}, []

    # ------------------------------------------------------------ Resource Graph

    def _resource_graph_post(self, request: Request, api_version: str) -> Response:
        if api_version not in resourcegraph.API_VERSIONS:
            raise _refuse(400, "InvalidApiVersionParameter",
                          f"The api-version '{api_version}' is invalid. The supported versions are "
                          f"'{', '.join(resourcegraph.API_VERSIONS)}'.")
        quota = self.state.graph_quota
        if quota is None:
            return resourcegraph.answer(self.state, _json_object(request))
        allowed, headers, resets = quota.take()
        if not allowed:
            return Response.json(429, {"error": {"code": "RateLimiting", "message": "Please provide below info when "
                                                 "asking for support: the user quota is exhausted."}},
                                 dict(headers, **{"Retry-After": str(max(1, math.ceil(resets)))}))
        answer = resourcegraph.answer(self.state, _json_object(request))
        answer.headers.update(headers)
        return answer

    # ------------------------------------------------------------ Microsoft.Features

    def _feature_answer(self, sub: str, namespace: str, feature: str) -> Response:
        if not self.state.has_subscription(sub):
            raise _refuse(404, "SubscriptionNotFound", f"The subscription '{sub}' could not be found.")
        state = self.state.feature_state(sub, f"{namespace}/{feature}")
        return Response.json(200, shapes.feature(sub, f"{namespace}/{feature}", state))

    def _feature_get(self, request: Request, api_version: str, sub: str, namespace: str, feature: str) -> Response:
        """Features_Get: `Registered` unless the seed / `--unregistered-feature` / `state.set_feature` says not."""
        return self._feature_answer(sub, namespace, feature)

    def _feature_register_post(self, request: Request, api_version: str, sub: str, namespace: str,
                               feature: str) -> Response:
        """Features_Register (what `az feature register` sends): registered at once (Azure may take
        minutes, showing `Registering`)."""
        if self.state.has_subscription(sub):
            self.state.set_feature(f"{namespace}/{feature}", True, sub)
        return self._feature_answer(sub, namespace, feature)

    def _feature_unregister_post(self, request: Request, api_version: str, sub: str, namespace: str,
                                 feature: str) -> Response:
        if self.state.has_subscription(sub):
            self.state.set_feature(f"{namespace}/{feature}", False, sub)
        return self._feature_answer(sub, namespace, feature)

    def _route(self, request: Request) -> Tuple[Route, "re.Match[str]"]:
        """The route for the request's method and path; 405 when only other methods serve the
        path, 404 when nothing does."""
        found = match_route(self.routes, request.method, request.path)
        if found.route is not None and found.match is not None:
            return found.route, found.match
        if found.allowed:
            raise _refuse(405, "MethodNotAllowed",
                          f"The requested method '{request.method}' is not allowed on this resource.")
        raise _refuse(404, "InvalidResourceType", f"The resource path '{request.path}' is not served here.")

    def _authenticate(self, request: Request) -> None:
        header = request.header("Authorization") or ""
        scheme, _, token = header.partition(" ")
        challenge = {"WWW-Authenticate": 'Bearer authorization_uri="https://login.microsoftonline.com/common", '
                                         'error="invalid_token", error_description="The access token is invalid."'}
        if scheme.lower() != "bearer" or not token.strip():
            raise _Refusal(shapes.error(401, "AuthenticationFailed",
                                        "Authentication failed. The 'Authorization' header is missing.",
                                        headers=challenge))
        problem = self.tokens.check(token.strip(), self.audiences + self.own_endpoints)
        if problem is not None:
            messages = {
                "InvalidAuthenticationToken": "The access token is invalid.",
                "ExpiredAuthenticationToken": "The access token has expired.",
                "InvalidAuthenticationTokenAudience": "The access token has been obtained for wrong audience "
                                                      "or resource.",
            }
            raise _Refusal(shapes.error(401, problem, messages[problem], headers=challenge))

    # ------------------------------------------------------------ lookups

    def _scale_set(self, sub: str, rg: str, name: str, parent: bool = False) -> ScaleSetRecord:
        if not self.state.has_subscription(sub):
            raise _refuse(404, "SubscriptionNotFound", f"The subscription '{sub}' could not be found.")
        if not self.state.has_resource_group(sub, rg):
            raise _refuse(404, "ResourceGroupNotFound", f"Resource group '{rg}' could not be found.")
        ss = self.state.scale_set(sub, rg, name)
        if ss is None:
            if parent:
                raise _refuse(404, "ParentResourceNotFound",
                              f"Can not perform requested operation on nested resource. Parent resource "
                              f"'{name}' not found.")
            raise _refuse(404, "ResourceNotFound",
                          f"The Resource 'Microsoft.Compute/virtualMachineScaleSets/{name}' under resource "
                          f"group '{rg}' was not found. For more details please go to "
                          f"https://aka.ms/ARMResourceNotFoundFix")
        return ss

    def _base(self, request: Request) -> str:
        return f"{self.scheme}://{request.header('Host') or 'localhost'}"

    def _lro_headers(self, request: Request, op: Operation, api_version: str, location: bool) -> Dict[str, str]:
        url = (f"{self._base(request)}/subscriptions/{op.scale_set.subscription}/providers/Microsoft.Compute"
               f"/locations/{quote(op.scale_set.location)}/operations/{op.op_id}")
        headers = {"Azure-AsyncOperation": f"{url}?{urlencode({'api-version': api_version})}"}
        if location:
            headers["Location"] = f"{url}?{urlencode({'monitor': 'true', 'api-version': api_version})}"
        if self.retry_after is not None:
            headers["Retry-After"] = str(self.retry_after)
        return headers

    # ------------------------------------------------------------ cloud metadata, subscriptions

    def _cloud_metadata_get(self, request: Request, api_version: Optional[str]) -> Response:
        base = self._base(request)
        return Response.json(200, shapes.cloud_metadata(base, self.login_endpoint or base, self.audiences))

    def _subscriptions_get(self, request: Request, api_version: str) -> Response:
        return self._page(request, api_version, self.state.subscriptions, shapes.subscription)

    def _subscription_get(self, request: Request, api_version: str, sub: str) -> Response:
        record = self.state.subscription(sub)
        if record is None:
            raise _refuse(404, "SubscriptionNotFound", f"The subscription '{sub}' could not be found.")
        with self.state.lock:
            return Response.json(200, shapes.subscription(record))

    # ------------------------------------------------------------ resource groups

    def _resource_group_record(self, sub: str, rg: str) -> ResourceGroupRecord:
        if not self.state.has_subscription(sub):
            raise _refuse(404, "SubscriptionNotFound", f"The subscription '{sub}' could not be found.")
        record = self.state.resource_group(sub, rg)
        if record is None:
            raise _refuse(404, "ResourceGroupNotFound", f"Resource group '{rg}' could not be found.")
        return record

    def _resource_groups_get(self, request: Request, api_version: str, sub: str) -> Response:
        if not self.state.has_subscription(sub):
            raise _refuse(404, "SubscriptionNotFound", f"The subscription '{sub}' could not be found.")
        return self._page(request, api_version, lambda: self.state.resource_groups(sub), shapes.resource_group)

    def _resource_group_get(self, request: Request, api_version: str, sub: str, rg: str) -> Response:
        record = self._resource_group_record(sub, rg)
        with self.state.lock:
            return Response.json(200, shapes.resource_group(record))

    def _resource_group_head(self, request: Request, api_version: str, sub: str, rg: str) -> Response:
        """ResourceGroups_CheckExistence: 204 when the group exists, 404 (no body) when not."""
        exists = self.state.has_subscription(sub) and self.state.has_resource_group(sub, rg)
        return Response(204 if exists else 404, b"")

    # ------------------------------------------------------------ scale sets

    def _scale_set_get(self, request: Request, api_version: str, sub: str, rg: str, name: str) -> Response:
        ss = self._scale_set(sub, rg, name)
        with self.state.lock:
            return Response.json(200, shapes.scale_set(ss, api_version))

    def _rg_scale_sets_get(self, request: Request, api_version: str, sub: str, rg: str) -> Response:
        if not self.state.has_resource_group(sub, rg):
            raise _refuse(404, "ResourceGroupNotFound", f"Resource group '{rg}' could not be found.")
        with self.state.lock:
            return Response.json(200, {"value": [shapes.scale_set(ss, api_version)
                                                 for ss in self.state.scale_sets(sub, rg)]})

    def _sub_scale_sets_get(self, request: Request, api_version: str, sub: str) -> Response:
        with self.state.lock:
            return Response.json(200, {"value": [shapes.scale_set(ss, api_version)
                                                 for ss in self.state.scale_sets(sub)]})

    def _scale_set_patch(self, request: Request, api_version: str, sub: str, rg: str, name: str) -> Response:
        ss = self._scale_set(sub, rg, name)
        putrules.check_preconditions(ss, request.header("If-Match"), request.header("If-None-Match"))
        body = _json_object(request)
        putrules.check_members(body, request.body)
        properties = _object(body.get("properties"), "properties")
        vm_patch = _object(properties.get("virtualMachineProfile"), "properties.virtualMachineProfile")
        _check_scheduled_events(vm_patch, api_version)
        eventspolicy.check(properties, api_version)
        capacity = _capacity(body)
        mode = _upgrade_mode(properties)
        top = putrules.top_level(body, properties)
        tags = body.get("tags") if isinstance(body.get("tags"), dict) else None
        with self.state.lock:
            # again under the lock that bumps the etag: two writers with the same If-Match, one wins
            putrules.check_preconditions(ss, request.header("If-Match"), request.header("If-None-Match"))
            new_profile = putrules.merge_patch(ss.vm_profile, vm_patch)
            putrules.check_changes(ss, top, new_profile, patch=True)
            putrules.apply_patch(ss, top)
            sku_name = _object(body.get("sku"), "sku").get("name")
            if sku_name:
                ss.sku = str(sku_name)
            ss.etag += 1
        self.state.apply_model(ss, new_profile, capacity=capacity, upgrade_policy=mode, tags=tags)
        op = self.state.begin_operation("update", ss)
        with self.state.lock:
            payload = shapes.scale_set(ss, api_version)
        return Response.json(200, payload, self._lro_headers(request, op, api_version, location=False))

    def _scale_set_put(self, request: Request, api_version: str, sub: str, rg: str, name: str) -> Response:
        """Create, or replace the whole model (putrules.py: unknown members, create-time
        properties, what an omitted property means)."""
        body = _json_object(request)
        putrules.check_members(body, request.body)
        properties = _object(body.get("properties"), "properties")
        vm_profile = properties.get("virtualMachineProfile")
        if vm_profile is not None:
            vm_profile = _object(vm_profile, "properties.virtualMachineProfile")
            _check_scheduled_events(vm_profile, api_version)
        eventspolicy.check(properties, api_version)
        capacity = _capacity(body)
        mode = _upgrade_mode(properties)
        top = putrules.top_level(body, properties)
        tags = body.get("tags") if isinstance(body.get("tags"), dict) else {}
        sku_name = _object(body.get("sku"), "sku").get("name")
        ss = self.state.scale_set(sub, rg, name)
        putrules.check_preconditions(ss, request.header("If-Match"), request.header("If-None-Match"))
        if ss is None:
            if not self.state.has_resource_group(sub, rg):
                raise _refuse(404, "ResourceGroupNotFound", f"Resource group '{rg}' could not be found.")
            if not body.get("location"):
                raise _refuse(400, "LocationRequired", "The location property is required for this definition.")
            orchestration = top.orchestration or "Uniform"
            putrules.check_create(top, orchestration)
            ss = self.state.add_scale_set(
                sub, rg, name, orchestration=orchestration, upgrade_policy=mode or "Manual",
                capacity=capacity or 0, location=body["location"], tags=tags,
                sku=sku_name or "Standard_D2s_v3", vm_profile=vm_profile or {}, zones=top.zones,
                platform_fault_domain_count=top.platform_fault_domain_count,
                single_placement_group=top.single_placement_group, overprovision=top.overprovision,
            )
            with self.state.lock:
                putrules.apply(ss, top)
            status, op = 201, self.state.begin_operation("create", ss)
        else:
            with self.state.lock:
                putrules.check_preconditions(ss, request.header("If-Match"), request.header("If-None-Match"))
                new_profile = _keep_omitted(vm_profile, ss.vm_profile) if vm_profile is not None else ss.vm_profile
                new_profile = defaults.fill_server_defaults(copy.deepcopy(new_profile))
                putrules.check_location(ss, body.get("location"))
                putrules.check_changes(ss, top, new_profile)
                kept = eventspolicy.kept_on_put(top.extra_properties.get(eventspolicy.POLICY),
                                                ss.extra_properties.get(eventspolicy.POLICY), api_version)
                if kept is not None:
                    top.extra_properties[eventspolicy.POLICY] = kept
                putrules.apply(ss, top)
                ss.etag += 1
                if sku_name:
                    ss.sku = str(sku_name)
            self.state.apply_model(ss, new_profile, capacity=capacity, upgrade_policy=mode, tags=tags)
            status, op = 200, self.state.begin_operation("update", ss)
        with self.state.lock:
            payload = shapes.scale_set(ss, api_version)
        return Response.json(status, payload, self._lro_headers(request, op, api_version, location=False))

    # ------------------------------------------------------------ instances

    def _vm_list_get(self, request: Request, api_version: str, sub: str, rg: str, name: str) -> Response:
        ss = self._scale_set(sub, rg, name, parent=True)
        if ss.orchestration == "Flexible":
            raise _refuse(409, "OperationNotAllowed",
                          f"Operation 'VirtualMachineScaleSetVMs.List.GET' is not allowed on Virtual Machine "
                          f"Scale Set '{ss.name}' since it uses orchestration mode 'Flexible'. List the "
                          f"virtual machines of the resource group instead.")
        keep = _vm_list_filter(request.param("$filter"))
        expand = _expands_instance_view(request)
        return self._page(request, api_version, lambda: [i for i in ss.instances.values() if keep(i)],
                          lambda inst: shapes.scale_set_vm(inst, expand), carry=("$filter", "$expand"))

    def _standalone_vms_get(self, request: Request, api_version: str, sub: str, rg: str) -> Response:
        if not self.state.has_resource_group(sub, rg):
            raise _refuse(404, "ResourceGroupNotFound", f"Resource group '{rg}' could not be found.")

        def members() -> List[InstanceRecord]:
            return [inst for ss in self.state.scale_sets(sub, rg) if ss.orchestration == "Flexible"
                    for inst in ss.instances.values()]

        return self._page(request, api_version, members, shapes.standalone_vm)

    def _page(self, request: Request, api_version: str, items: Callable[[], List[_Item]],
              shape: Callable[[_Item], Dict[str, Any]], carry: Tuple[str, ...] = ()) -> Response:
        """A list answer of `state.page_size` items with ARM's nextLink ($skiptoken) paging; the
        query parameters named in `carry` (a `$filter`) are repeated in the nextLink."""
        token = request.param("$skiptoken") or "0"
        if not token.isdigit():
            raise _refuse(400, "InvalidParameter", f"The skip token '{token}' is invalid.", "$skiptoken")
        start, size = int(token), max(1, self.state.page_size)
        with self.state.lock:
            everything = items()
            payload: Dict[str, Any] = {"value": [shape(i) for i in everything[start:start + size]]}
            if start + size < len(everything):
                params = {"api-version": api_version}
                params.update({name: value for name in carry for value in [request.param(name)] if value})
                params["$skiptoken"] = str(start + size)
                query = urlencode(params)
                payload["nextLink"] = f"{self._base(request)}{request.path}?{query}"
        return Response.json(200, payload)

    def _instance(self, ss: ScaleSetRecord, iid: str) -> InstanceRecord:
        inst = ss.instance(iid)
        if inst is None:
            raise _refuse(404, "NotFound", "The entity was not found in this Azure location.")
        return inst

    def _uniform_vm(self, sub: str, rg: str, name: str, iid: str, operation: str) -> InstanceRecord:
        """A Uniform scale set's VM; Flexible members are standalone VMs (409 OperationNotAllowed)."""
        ss = self._scale_set(sub, rg, name, parent=True)
        if ss.orchestration == "Flexible":
            raise _refuse(409, "OperationNotAllowed",
                          f"Operation '{operation}' is not allowed on Virtual Machine Scale Set '{ss.name}' "
                          f"since it uses orchestration mode 'Flexible'.")
        return self._instance(ss, iid)

    def _vm_get(self, request: Request, api_version: str, sub: str, rg: str, name: str, iid: str) -> Response:
        inst = self._uniform_vm(sub, rg, name, iid, "VirtualMachineScaleSetVMs.GET")
        with self.state.lock:
            return Response.json(200, shapes.scale_set_vm(inst, _expands_instance_view(request)))

    def _vm_instance_view_get(self, request: Request, api_version: str, sub: str, rg: str, name: str,
                              iid: str) -> Response:
        inst = self._uniform_vm(sub, rg, name, iid, "VirtualMachineScaleSetVMs.GetInstanceView.GET")
        with self.state.lock:
            return Response.json(200, shapes.instance_view(inst))

    def _scale_set_instance_view_get(self, request: Request, api_version: str, sub: str, rg: str,
                                     name: str) -> Response:
        ss = self._scale_set(sub, rg, name, parent=True)
        with self.state.lock:
            return Response.json(200, shapes.scale_set_instance_view(ss))

    def _vm_delete(self, request: Request, api_version: str, sub: str, rg: str, name: str, iid: str) -> Response:
        ss = self._scale_set(sub, rg, name, parent=True)
        inst = self._instance(ss, iid)
        op = self.state.delete_instances(ss, [inst.instance_id])
        return Response(202, b"", self._lro_headers(request, op, api_version, location=True))

    def _standalone_member(self, sub: str, rg: str, vm: str) -> InstanceRecord:
        for ss in self.state.scale_sets(sub, rg):
            if ss.orchestration == "Flexible":
                inst = ss.instance(vm)
                if inst is not None:
                    return inst
        raise _refuse(404, "ResourceNotFound",
                      f"The Resource 'Microsoft.Compute/virtualMachines/{vm}' under resource group '{rg}' was "
                      f"not found. For more details please go to https://aka.ms/ARMResourceNotFoundFix")

    def _standalone_vm_get(self, request: Request, api_version: str, sub: str, rg: str, vm: str) -> Response:
        with self.state.lock:
            return Response.json(200, shapes.standalone_vm(self._standalone_member(sub, rg, vm)))

    def _standalone_vm_delete(self, request: Request, api_version: str, sub: str, rg: str, vm: str) -> Response:
        inst = self._standalone_member(sub, rg, vm)
        op = self.state.delete_instances(inst.scale_set, [inst.instance_id])
        return Response(202, b"", self._lro_headers(request, op, api_version, location=True))

    def _manualupgrade_post(self, request: Request, api_version: str, sub: str, rg: str, name: str) -> Response:
        ss = self._scale_set(sub, rg, name)
        op = self.state.manual_upgrade(ss, _instance_ids(request))
        return Response(202, b"", self._lro_headers(request, op, api_version, location=True))

    def _delete_instances_post(self, request: Request, api_version: str, sub: str, rg: str, name: str) -> Response:
        ss = self._scale_set(sub, rg, name)
        op = self.state.delete_instances(ss, _instance_ids(request))
        return Response(202, b"", self._lro_headers(request, op, api_version, location=True))

    # ------------------------------------------------------------ Maintenance RP: acknowledge

    def _maintenance_scale_set(self, api_version: str, versions: Tuple[str, ...], sub: str, rg: str, kind: str,
                               name: str) -> ScaleSetRecord:
        if api_version not in versions:
            raise _refuse(400, "InvalidApiVersionParameter",
                          f"The api-version '{api_version}' is invalid. The supported versions are "
                          f"'{', '.join(versions)}'.")
        if kind.lower() != "virtualmachinescalesets":
            raise _refuse(404, "ResourceNotFound", f"The emulator serves scheduled events of scale sets only, "
                                                   f"not of {kind} ('{name}').")
        return self._scale_set(sub, rg, name, parent=True)

    def _acknowledge_post(self, request: Request, api_version: str, sub: str, rg: str, kind: str, name: str,
                          eid: str) -> Response:
        ss = self._maintenance_scale_set(api_version, maintenance.ACKNOWLEDGE_API_VERSIONS, sub, rg, kind, name)
        if not self.state.maintenance.acknowledge(ss, [eid], by="Microsoft.Maintenance")[eid]:
            raise _refuse(404, "NotFound", f"Scheduled event '{eid}' was not found on '{ss.name}'.")
        return Response.json(200, {"value": maintenance.APPROVED})

    def _acknowledge_list_post(self, request: Request, api_version: str, sub: str, rg: str, kind: str,
                               name: str) -> Response:
        ss = self._maintenance_scale_set(api_version, maintenance.BATCH_API_VERSIONS, sub, rg, kind, name)
        ids = _json_object(request).get("value")
        if not isinstance(ids, list) or not ids or not all(isinstance(i, str) and i for i in ids):
            raise _refuse(400, "InvalidRequestContent", "The request content must be {\"value\": [scheduled event "
                                                        "ids]} with at least one id.")
        results = self.state.maintenance.acknowledge(ss, list(dict.fromkeys(ids)), by="Microsoft.Maintenance",
                                                     batch=True)
        refused = maintenance.batch_error(results)
        return Response.json(207, refused) if refused else Response.json(200, {"value": maintenance.APPROVED})

    # ------------------------------------------------------------ Run Command

    def _vm_run_command_post(self, request: Request, api_version: str, sub: str, rg: str, name: str,
                             iid: str) -> Response:
        inst = self._uniform_vm(sub, rg, name, iid, "VirtualMachineScaleSetVMs.RunCommand.POST")
        return self._run_command(request, api_version, inst)

    def _standalone_vm_run_command_post(self, request: Request, api_version: str, sub: str, rg: str,
                                        vm: str) -> Response:
        with self.state.lock:
            inst = self._standalone_member(sub, rg, vm)
        return self._run_command(request, api_version, inst)

    def _run_command(self, request: Request, api_version: str, inst: InstanceRecord) -> Response:
        with self.state.lock:
            ss = inst.scale_set
            os_type = "Windows" if defaults.is_windows(ss.vm_profile) else "Linux"
            where = (ss.subscription, ss.resource_id, inst.name, ss.location)
        body = _json_object(request)
        problem = runcommand.check_input(body, os_type)
        if problem is not None:
            raise _refuse(400, *problem)
        record = self.state.run_commands.start(where[0], where[1], where[2], os_type, body["commandId"],
                                               body.get("script", []))
        url = (f"{self._base(request)}/subscriptions/{where[0]}/providers/Microsoft.Compute/locations/"
               f"{quote(where[3])}/operations/{record.op_id}")
        headers = {"Azure-AsyncOperation": f"{url}?{urlencode({'api-version': api_version})}",
                   "Location": f"{url}?{urlencode({'monitor': 'true', 'api-version': api_version})}"}
        return Response(202, b"", headers)

    def _run_command_status(self, request: Request, record: runcommand.RunCommandRecord) -> Response:
        if (request.param("monitor") or "").lower() == "true":
            return Response.json(200, record.result()) if record.done else Response(202, b"")
        body: Dict[str, Any] = {"startTime": shapes.iso_time(record.at), "status": "InProgress", "name": record.op_id}
        if record.done:
            body.update(status="Succeeded", endTime=shapes.iso_time(record.ended_at or record.at),
                        properties={"output": record.result()})
        return Response.json(200, body)

    # ------------------------------------------------------------ LRO status

    def _operation_get(self, request: Request, api_version: str, sub: str, loc: str, op: str) -> Response:
        command = self.state.run_commands.poll(op)
        if command is not None and command.subscription.lower() == sub.lower():
            return self._run_command_status(request, command)
        stuck = request.fault is not None and request.fault.stuck  # fault: the operation does not advance
        operation = self.state.operation(op) if stuck else self.state.poll(op)
        if operation is None or operation.scale_set.subscription.lower() != sub.lower():
            raise _refuse(404, "NotFound", f"The operation '{op}' was not found.")
        with self.state.lock:
            body = operation.body(shapes.iso_time)
            status = operation.status
            if stuck:
                body = {"startTime": body["startTime"], "status": "InProgress", "name": body["name"]}
                status = "InProgress"
        if (request.param("monitor") or "").lower() == "true":  # Location-header semantics
            if status == "InProgress":
                return Response(202, b"", self._lro_headers(request, operation, api_version, location=True))
            if status == "Failed":
                return Response.json(500, {"error": body["error"]})
            return Response(200, b"")
        headers = {"Retry-After": str(self.retry_after)} if self.retry_after is not None and status == "InProgress" else {}
        return Response.json(200, body, headers)


# ---------------------------------------------------------------- request rules

# VirtualMachineScaleSetVMs_List's documented $filter values (swagger 2024-11-01), whitespace and
# case aside; any other filter is refused rather than ignored (a client would count wrong rows).
_VM_FILTERS: Dict[str, Callable[[InstanceRecord], bool]] = {
    "properties/latestmodelapplied eq true": lambda inst: inst.latest_model_applied,
    "properties/latestmodelapplied eq false": lambda inst: not inst.latest_model_applied,
    "startswith(instanceview/statuses/code, 'powerstate') eq true": lambda inst: True,
}


def _vm_list_filter(text: Optional[str]) -> Callable[[InstanceRecord], bool]:
    if text is None or not text.strip():
        return lambda inst: True
    keep = _VM_FILTERS.get(" ".join(text.split()).lower().replace("( ", "(").replace(" )", ")"))
    if keep is None:
        raise _refuse(400, "InvalidParameter",
                      f"The value '{text}' of $filter is not supported. Allowed values are "
                      f"'startswith(instanceView/statuses/code, 'PowerState') eq true', "
                      f"'properties/latestModelApplied eq true', 'properties/latestModelApplied eq false'.",
                      "$filter")
    return keep


def _json_object(request: Request) -> Dict[str, Any]:
    try:
        body = request.json() if request.body else {}
    except ValueError as exc:
        raise _refuse(400, "InvalidRequestContent",
                      f"The request content was invalid and could not be deserialized: '{exc}'.") from None
    if not isinstance(body, dict):
        raise _refuse(400, "InvalidRequestContent",
                      "The request content was invalid and could not be deserialized: expected a JSON object.")
    return body


def _object(value: Any, where: str) -> Dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise _refuse(400, "InvalidRequestContent",
                      f"The request content was invalid and could not be deserialized: '{where}' must be an object.")
    return value


def _expands_instance_view(request: Request) -> bool:
    """`$expand=instanceView` (the only value the VM list allows; the VM GET also takes it)."""
    return any(part.strip().lower() == "instanceview" for part in (request.param("$expand") or "").split(","))


def _instance_ids(request: Request) -> List[str]:
    body = _json_object(request)
    ids = body.get("instanceIds")
    if ids is None:
        raise _refuse(400, "InvalidRequestContent",
                      "The request content was invalid and could not be deserialized: 'Required property "
                      "'instanceIds' not found in JSON. Path '', line 1, position 2.'.")
    if not isinstance(ids, list) or not all(isinstance(i, (str, int)) and not isinstance(i, bool) for i in ids):
        raise _refuse(400, "InvalidParameter", "instanceIds must be a list of instance id strings.", "instanceIds")
    return [str(i) for i in ids]


def _capacity(body: Dict[str, Any]) -> Optional[int]:
    sku = _object(body.get("sku"), "sku")
    capacity = sku.get("capacity")
    if capacity is None:
        return None
    if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
        raise _refuse(400, "InvalidParameter", f"The value '{capacity}' of sku.capacity is invalid.", "sku.capacity")
    return capacity


def _upgrade_mode(properties: Dict[str, Any]) -> Optional[str]:
    mode = _object(properties.get("upgradePolicy"), "properties.upgradePolicy").get("mode")
    if mode is None:
        return None
    for option in UPGRADE_POLICIES:
        if str(mode).lower() == option.lower():
            return option
    raise _refuse(400, "InvalidParameter", f"Upgrade mode '{mode}' is not valid.", "upgradePolicy.mode")


def _check_scheduled_events(vm_profile: Dict[str, Any], api_version: str) -> None:
    """The 2019-03-01 minimum, the notBeforeTimeout range and the enable type (absent: true)."""
    if "scheduledEventsProfile" not in vm_profile:
        return
    if not shapes.supports_scheduled_events(api_version):
        raise _refuse(400, "BadRequest",
                      f"{shapes.MEMBER_NOT_FOUND}. Path 'properties.virtualMachineProfile.scheduledEventsProfile'.")
    sep = vm_profile["scheduledEventsProfile"]
    if sep is None:
        return
    sep = _object(sep, "properties.virtualMachineProfile.scheduledEventsProfile")
    tnp = sep.get("terminateNotificationProfile")
    if tnp is None:
        return
    tnp = _object(tnp, "scheduledEventsProfile.terminateNotificationProfile")
    enable = tnp.get("enable")
    if enable is None:  # Azure reads back `enable: true` for a timeout-only profile (az sends one)
        tnp["enable"] = True
    elif isinstance(enable, str) and enable.lower() in ("true", "false"):
        tnp["enable"] = enable.lower() == "true"
    elif enable is not None and not isinstance(enable, bool):
        raise _refuse(400, "InvalidParameter", f"The value '{enable}' of enable is not a boolean.",
                      "terminateNotificationProfile.enable")
    timeout = tnp.get("notBeforeTimeout")
    if timeout is None:
        return
    minutes = iso_to_minutes_lenient(timeout) if isinstance(timeout, str) and timeout.upper().startswith("P") else None
    if minutes is None:
        raise _refuse(400, "InvalidParameter",
                      f"The value '{timeout}' of notBeforeTimeout is not a valid ISO 8601 duration.",
                      "terminateNotificationProfile.notBeforeTimeout")
    if not MIN_MINUTES <= minutes <= MAX_MINUTES:
        raise _refuse(400, "InvalidParameter",
                      f"NotBeforeTimeout '{timeout}' is out of range: it must be between PT{MIN_MINUTES}M and "
                      f"PT{MAX_MINUTES}M.", "terminateNotificationProfile.notBeforeTimeout")


KEPT_WHEN_OMITTED = ("storageProfile", "osProfile", "networkProfile")


def _keep_omitted(new: Dict[str, Any], stored: Dict[str, Any]) -> Dict[str, Any]:
    """PUT semantics for what Compute keeps when a full PUT leaves it out: the image reference
    (`az vmss update` GETs, drops storageProfile.imageReference "to avoid unnecessary permission
    check of image", then PUTs) and the storage, OS and network sections left out altogether
    (the emulator's choice: a model without them is not one Azure can hold)."""
    out = dict(new)
    for section in KEPT_WHEN_OMITTED:
        if out.get(section) is None and isinstance(stored.get(section), dict):
            out[section] = stored[section]
    storage, stored_storage = out.get("storageProfile"), stored.get("storageProfile")
    if isinstance(storage, dict) and isinstance(stored_storage, dict) and storage.get("imageReference") is None \
            and stored_storage.get("imageReference") is not None:
        out["storageProfile"] = dict(storage, imageReference=stored_storage["imageReference"])
    return out


# ---------------------------------------------------------------- serving


@dataclass
class ArmServers(RunningServers):
    """A running ARM emulator and its token endpoint. Stop with `stop()` or use as a context manager."""

    state: ArmState
    arm: ArmEmulator
    tokens: TokenEndpoint
    arm_server: EmulatorServer
    token_server: EmulatorServer

    @property
    def arm_url(self) -> str:
        return self.arm_server.url

    @property
    def token_url(self) -> str:
        """The IDENTITY_ENDPOINT value."""
        return identity_endpoint(self.token_server)

    @property
    def env(self) -> Dict[str, str]:
        """IDENTITY_ENDPOINT / IDENTITY_HEADER for DefaultAzureCredential."""
        return credential_env(self.token_server)

    def reset(self, state: Optional[ArmState] = None) -> ArmState:
        """Serve `state` (a fresh ArmState when None) with an empty request log, no pending faults
        and no token remembered as issued; lets a test suite share one running server pair across
        tests (a stop costs ~0.5 s)."""
        for server in (self.arm_server, self.token_server):
            server.reset()
        self.tokens.recently_issued.clear()  # an earlier test's tokens are not this one's
        self.state = self.arm.state = state if state is not None else ArmState()
        self.tokens.tenant_id = self.state.tenant_id
        return self.state

    def stop(self) -> None:
        stop_servers([self.arm_server, self.token_server])


def start_arm(
    state: Optional[ArmState] = None,
    seed: Union[None, str, Path, Dict[str, Any]] = None,
    host: str = "127.0.0.1",
    port: int = 0,
    token_port: int = 0,
    ssl_context: Optional[ssl.SSLContext] = None,
    clock: Optional[Clock] = None,
    lro_retry_after: Optional[int] = None,
    quotas: Union[None, Dict[str, Any], List[Any]] = None,
    latency: float = 0.0,
) -> ArmServers:
    """Start the ARM emulator (HTTPS when `ssl_context` is given) and the token endpoint (always
    http, like App Service's local endpoint) in background threads; returns them running.
    `lro_retry_after`: seconds sent as Retry-After on LRO answers (None: no header). `latency`:
    seconds added before every answer of both servers (a realistic round trip; `--latency MS`).
    The inventory's own settings (`page_size`, `lro_polls`) are `state`'s or the seed's."""
    if state is None:
        state = ArmState(clock=clock) if clock is not None else ArmState()
    if seed is not None:
        state.load_seed(seed)
    if quotas:
        state.quotas.configure(quota.parse_limits(quotas))
    tokens = TokenEndpoint(tenant_id=state.tenant_id)
    arm = ArmEmulator(state, tokens, scheme="https" if ssl_context is not None else "http",
                      retry_after=lro_retry_after)
    token_server = EmulatorServer(tokens, host=host, port=token_port).start()
    arm.login_endpoint = token_server.url
    try:
        arm_server = EmulatorServer(arm, host=host, port=port, ssl_context=ssl_context,
                                    answer_faults=True).start()
    except BaseException:
        token_server.stop()
        raise
    arm_server.latency = token_server.latency = max(0.0, latency)
    arm.own_endpoints = endpoint_aliases(arm_server.url)
    tokens.allow_resources(arm.own_endpoints)
    return ArmServers(state, arm, tokens, arm_server, token_server)

