"""`render(fmt, minutes)`: the terminate-notification setting as a snippet for one IaC format.

Why derive everything from `control.body`: the control plane sends exactly `body.patch_bytes`, so
the `rest` format is those bytes and every other format is a re-spelling of the same profile dict.
There is no second copy of the field names or the timeout format to drift.
"""

from __future__ import annotations

import dataclasses
import json
import re
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from vmss_terminate.control import body
from vmss_terminate.control.events_policy import NEWER_MIN_API, POLICY_MIN_API, PolicyChange
from vmss_terminate.errors import UsageError
from vmss_terminate.iac import azure_policy, eventgrid, kubernetes
from vmss_terminate.timeout import parse_timeout

FORMATS = ("arm", "bicep", "terraform", "rest", "cli", "policy", "kubernetes", "eventgrid")

# azurerm spells the two ARM fields differently inside `termination_notification { }`.
TERRAFORM_FIELDS = {"enable": "enabled", "notBeforeTimeout": "timeout"}

_RG_PLACEHOLDER = '"$RESOURCE_GROUP"'
_NAME_PLACEHOLDER = '"$VMSS_NAME"'
_BICEP_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


@dataclass(frozen=True)
class RenderOptions:
    """What `render` takes besides the format and the timeout, each field read by the formats its
    comment names (the `render` command's options)."""

    enable: bool = True  # every format but kubernetes and eventgrid
    resource_group: Optional[str] = None  # cli, eventgrid
    name: Optional[str] = None  # cli
    namespace: str = kubernetes.DEFAULT_NAMESPACE  # kubernetes
    image: str = kubernetes.DEFAULT_IMAGE  # kubernetes
    metrics_port: int = kubernetes.DEFAULT_PORT  # kubernetes
    agent_args: Sequence[str] = ()  # kubernetes
    policy: Optional[PolicyChange] = None  # every format but kubernetes and eventgrid
    subscription: Optional[str] = None  # eventgrid
    storage_account: Optional[str] = None  # eventgrid
    queue: str = eventgrid.DEFAULT_QUEUE  # eventgrid
    location: str = "eastus"  # eventgrid
    principal_id: Optional[str] = None  # eventgrid


def render(fmt: str, minutes: Union[int, str, None], options: Optional[RenderOptions] = None,
           **fields: Any) -> str:
    """Return the snippet for `fmt` (one of FORMATS), ending with a newline.

    `minutes` is anything `vmss_terminate.timeout.parse_timeout` accepts (10, "10m", "PT10M");
    it is required when enabling and must be None when `enable` is False. `resource_group` and
    `name` only fill in the `cli` format (shell variables are printed when they are None).
    `kubernetes` is the agent's DaemonSet with its RBAC (`iac/kubernetes.py`: `namespace`, `image`,
    `metrics_port`, `agent_args`); it takes no timeout, which is the scale set's setting.
    `policy` (the `enable` options --event-grid, --events-api-version, --auto-approve KIND): the
    top-level scheduledEventsPolicy too (every format but kubernetes); with a policy the timeout
    may be left out, as for `enable` (then only the policy is rendered).
    `eventgrid` is the Event Grid -> Storage queue setup of one subscription as Azure CLI commands
    (`iac/eventgrid.py`: `subscription`, `resource_group`, `storage_account`, `queue`, `location`,
    `principal_id`), the resources of templates/*/eventgrid-queue*.
    The options are a `RenderOptions`, or its fields as keywords (`render("cli", 10, name="web")`).
    Raises UsageError (exit 2) for an unknown format or a bad timeout.
    """
    o = dataclasses.replace(options, **fields) if options is not None else RenderOptions(**fields)
    enable, resource_group, name, policy = o.enable, o.resource_group, o.name, o.policy
    if policy is not None and policy.empty:
        policy = None
    if fmt == "eventgrid":
        if minutes is not None or not enable or policy is not None:
            raise UsageError("--format eventgrid renders the Event Grid -> Storage queue setup of a subscription: "
                             "give no --timeout, --disable or scheduled-events policy options")
        if not o.subscription or not resource_group or not o.storage_account:
            raise UsageError("--format eventgrid needs --subscription, --resource-group and --storage-account")
        return eventgrid.render_cli(o.subscription, resource_group, o.storage_account, queue=o.queue,
                                    location=o.location, principal_id=o.principal_id)
    if fmt == "kubernetes":
        if policy is not None:
            raise UsageError("--format kubernetes renders the agent's DaemonSet: the scheduled-events policy is the "
                             "scale set's (render it with --format arm|bicep|terraform|rest|cli|policy)")
        if minutes is not None or not enable:
            raise UsageError("--format kubernetes renders the agent's DaemonSet: the timeout is the scale set's "
                             "(render it with --format arm|bicep|terraform|rest|cli); give no --timeout or --disable")
        return kubernetes.render_kubernetes(o.namespace, o.image, o.metrics_port, o.agent_args)
    renderer = _RENDERERS.get(fmt)
    if renderer is None:
        raise UsageError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if enable and minutes is None and policy is None:
        raise UsageError("a timeout is required to enable terminate notifications (5..15 minutes, e.g. 10m)")
    if not enable and minutes is not None:
        raise UsageError("a timeout makes no sense when disabling terminate notifications")
    if fmt == "policy" and (not enable or minutes is None):
        raise UsageError("--format policy audits for enabled terminate notification: give --timeout, not --disable")
    parsed = parse_timeout(minutes) if minutes is not None else None
    if policy is None:
        return renderer(enable, parsed, resource_group, name)
    return _POLICY_RENDERERS[fmt](None if enable and parsed is None else enable, parsed, policy, resource_group, name)


def scheduled_events_profile(enable: bool, minutes: Optional[int]) -> Dict[str, Any]:
    """`scheduledEventsProfile` exactly as it sits inside the control plane's PATCH body."""
    patch = body.patch_body(enable, minutes)
    profile: Dict[str, Any] = patch["properties"]["virtualMachineProfile"]["scheduledEventsProfile"]
    return profile


def _rest(enable: bool, minutes: Optional[int], _rg: Optional[str], _name: Optional[str]) -> str:
    return body.patch_bytes(enable, minutes).decode("utf-8")


def _arm(enable: bool, minutes: Optional[int], _rg: Optional[str], _name: Optional[str]) -> str:
    # Valid JSON on its own: merge the one key into properties.virtualMachineProfile.
    fragment = {"scheduledEventsProfile": scheduled_events_profile(enable, minutes)}
    return json.dumps(fragment, indent=2) + "\n"


def _bicep(enable: bool, minutes: Optional[int], _rg: Optional[str], _name: Optional[str]) -> str:
    lines = ["// inside properties.virtualMachineProfile of Microsoft.Compute/virtualMachineScaleSets@2019-03-01 or later"]
    lines += _bicep_entries({"scheduledEventsProfile": scheduled_events_profile(enable, minutes)}, 0)
    return "\n".join(lines) + "\n"


def _terraform(enable: bool, minutes: Optional[int], _rg: Optional[str], _name: Optional[str]) -> str:
    profile = scheduled_events_profile(enable, minutes)["terminateNotificationProfile"]
    lines = [
        "# inside azurerm_linux_virtual_machine_scale_set or azurerm_windows_virtual_machine_scale_set",
        "# (azurerm 3.0 or later; older providers spell the block terminate_notification)",
        "termination_notification {",
    ]
    width = max(len(TERRAFORM_FIELDS[key]) for key in profile)
    for key, value in profile.items():
        lines.append(f"  {TERRAFORM_FIELDS[key].ljust(width)} = {json.dumps(value)}")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _cli(enable: bool, minutes: Optional[int], rg: Optional[str], name: Optional[str]) -> str:
    group = shlex.quote(rg) if rg else _RG_PLACEHOLDER
    vmss = shlex.quote(name) if name else _NAME_PLACEHOLDER
    target = f"--resource-group {group} --name {vmss}"
    if enable:
        az_flags = f"--enable-terminate-notification true --terminate-notification-time {minutes}"
        ours = f"vmss-terminate enable -g {group} -n {vmss} --timeout {body.profile(True, minutes)['notBeforeTimeout']}"
    else:
        az_flags = "--enable-terminate-notification false"
        ours = f"vmss-terminate disable -g {group} -n {vmss}"
    return "\n".join([
        "# Azure CLI: change the scale set model, then bring existing instances up to it",
        f"az vmss update {target} {az_flags}",
        f"az vmss update-instances {target} --instance-ids '*'",
        "# vmss-terminate: both steps (PATCHes only if the model differs, then upgrades stale instances)",
        ours,
    ]) + "\n"


def _policy(enable: bool, minutes: Optional[int], _rg: Optional[str], _name: Optional[str]) -> str:
    assert minutes is not None
    return azure_policy.render_definition(minutes)


def _entries(mapping: Dict[str, Any], depth: int, key_of: Callable[[str], str], scalar: Callable[[Any], str],
             separator: str) -> List[str]:
    """A nested mapping as Bicep (`key: value`) or HCL (`key = value`) object lines, two spaces a level."""
    pad = "  " * depth
    lines = []
    for key, value in mapping.items():
        label = key_of(key) + separator
        if isinstance(value, dict):
            lines.append(f"{pad}{label}{{")
            lines += _entries(value, depth + 1, key_of, scalar, separator)
            lines.append(f"{pad}}}")
        else:
            lines.append(f"{pad}{label}{scalar(value)}")
    return lines


def _bicep_entries(mapping: Dict[str, Any], depth: int) -> List[str]:
    return _entries(mapping, depth, lambda key: key if _BICEP_IDENT.match(key) else _bicep_string(key),
                    _bicep_scalar, ": ")


def _bicep_scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    return _bicep_string(str(value))


def _bicep_string(text: str) -> str:
    escaped = text.replace("\\", "\\\\").replace("'", "\\'").replace("${", "\\${")
    return f"'{escaped}'"


_RENDERERS: Dict[str, Callable[[bool, Optional[int], Optional[str], Optional[str]], str]] = {
    "arm": _arm,
    "bicep": _bicep,
    "terraform": _terraform,
    "rest": _rest,
    "cli": _cli,
    "policy": _policy,
}


# --- with the scheduled-events policy ---------------------------------------------------------------
# The policy is a top-level property (properties.scheduledEventsPolicy), beside virtualMachineProfile:
# each format shows where both go. `enable` None: the policy alone (as `enable` without --timeout).

PolicyRenderer = Callable[[Optional[bool], Optional[int], PolicyChange, Optional[str], Optional[str]], str]


def _properties(enable: Optional[bool], minutes: Optional[int], policy: PolicyChange) -> Dict[str, Any]:
    properties: Dict[str, Any] = body.patch_body(enable, minutes, policy.fragment())["properties"]
    return properties


def _min_api(policy: PolicyChange) -> str:
    needed = policy.needs()
    return needed[0] if needed is not None else POLICY_MIN_API


def _rest_policy(enable: Optional[bool], minutes: Optional[int], policy: PolicyChange, _rg: Optional[str],
                 _name: Optional[str]) -> str:
    return body.patch_bytes(enable, minutes, policy.fragment()).decode("utf-8")


def _arm_policy(enable: Optional[bool], minutes: Optional[int], policy: PolicyChange, _rg: Optional[str],
                _name: Optional[str]) -> str:
    # Valid JSON on its own: merge into the scale set resource's `properties` (apiVersion _min_api or later).
    return json.dumps({"properties": _properties(enable, minutes, policy)}, indent=2) + "\n"


def _bicep_policy(enable: Optional[bool], minutes: Optional[int], policy: PolicyChange, _rg: Optional[str],
                  _name: Optional[str]) -> str:
    lines = [f"// inside properties of Microsoft.Compute/virtualMachineScaleSets@{_min_api(policy)} or later "
             f"(scheduledEventsPolicy: {POLICY_MIN_API}; allInstancesDown and scheduledEventsApiVersion: "
             f"{NEWER_MIN_API}); Event Grid publishing is a preview that needs the subscription feature "
             "Microsoft.Compute/SendScheduledEventsPolicy registered"]
    lines += _bicep_entries(_properties(enable, minutes, policy), 0)
    return "\n".join(lines) + "\n"


def _terraform_policy(enable: Optional[bool], minutes: Optional[int], policy: PolicyChange, rg: Optional[str],
                      name: Optional[str]) -> str:
    lines: List[str] = []
    if enable is not None:
        lines += _terraform(enable, minutes, rg, name).rstrip("\n").splitlines()
        lines.append("")
    lines += [
        "# azurerm_*_virtual_machine_scale_set has no argument for scheduledEventsPolicy (not in the azurerm",
        "# provider's documented arguments; docs/iac.md): set it with the azapi provider (Azure/azapi >= 2.0),",
        "# which changes only the properties in `body` of the existing scale set.",
        'resource "azapi_update_resource" "scheduled_events_policy" {',
        f'  type        = "Microsoft.Compute/virtualMachineScaleSets@{_min_api(policy)}"',
        "  resource_id = azurerm_linux_virtual_machine_scale_set.this.id  # or the windows resource's id",
        "  body = {",
        "    properties = {",
    ]
    lines += _hcl_entries({"scheduledEventsPolicy": policy.fragment()}, 3)
    lines += ["    }", "  }", "}"]
    return "\n".join(lines) + "\n"


def _hcl_entries(mapping: Dict[str, Any], depth: int) -> List[str]:
    return _entries(mapping, depth, str, json.dumps, " = ")


# az vmss update's switches (azure-cli 2.91 `vmss update`, min api 2024-03-01); az sends scale sets at
# api-version 2024-11-01 ("latest" profile), which has no allInstancesDown / scheduledEventsApiVersion.
_AZ_SWITCHES = {"user-reboot": "--enable-user-reboot-scheduled-events",
                "user-redeploy": "--enable-user-redeploy-scheduled-events"}


def _cli_policy(enable: Optional[bool], minutes: Optional[int], policy: PolicyChange, rg: Optional[str],
                name: Optional[str]) -> str:
    group = shlex.quote(rg) if rg else _RG_PLACEHOLDER
    vmss = shlex.quote(name) if name else _NAME_PLACEHOLDER
    flags: List[str] = []
    if enable is not None:
        flags.append(f"--enable-terminate-notification {'true' if enable else 'false'}")
        if enable:
            flags.append(f"--terminate-notification-time {minutes}")
    if policy.event_grid is not None:
        flags.append(f"--additional-scheduled-events {'true' if policy.event_grid else 'false'}")
    unsupported = []
    for kind in policy.auto_approve + policy.no_auto_approve:
        if kind in _AZ_SWITCHES:
            flags.append(f"{_AZ_SWITCHES[kind]} {'true' if kind in policy.auto_approve else 'false'}")
        else:
            unsupported.append(f"--{'auto-approve' if kind in policy.auto_approve else 'no-auto-approve'} {kind}")
    if policy.events_api_version is not None:
        unsupported.append(f"--events-api-version {policy.events_api_version}")
    ours = ["vmss-terminate", "enable", "-g", group, "-n", vmss]
    if enable is False:
        ours[1] = "disable"
    elif minutes is not None:
        ours += ["--timeout", body.profile(True, minutes)["notBeforeTimeout"]]
    out = ["# Azure CLI: change the scale set (the scheduled-events policy needs no instance upgrade)"]
    if flags:
        out.append(f"az vmss update --resource-group {group} --name {vmss} {' '.join(flags)}")
    if unsupported:
        out.append(f"# not said by az vmss update here (it sends api-version 2024-11-01): {', '.join(unsupported)}")
    if enable is not None:
        out.append(f"az vmss update-instances --resource-group {group} --name {vmss} --instance-ids '*'")
    out.append("# vmss-terminate: one PATCH (only what differs), then upgrades stale instances when the profile "
               "changed")
    out.append(" ".join(ours + policy.args()))
    return "\n".join(out) + "\n"


def _policy_definition(enable: Optional[bool], minutes: Optional[int], policy: PolicyChange, _rg: Optional[str],
                       _name: Optional[str]) -> str:
    assert minutes is not None
    return azure_policy.render_definition(minutes, policy)


_POLICY_RENDERERS: Dict[str, PolicyRenderer] = {
    "arm": _arm_policy,
    "bicep": _bicep_policy,
    "terraform": _terraform_policy,
    "rest": _rest_policy,
    "cli": _cli_policy,
    "policy": _policy_definition,
}
