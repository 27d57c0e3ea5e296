"""`render(fmt, minutes)`: the terminate-notification setting as a snippet for one IaC format.

Why derive everything from `control.body`: the control plane sends exactly `body.patch_bytes`, so
the `rest` format is those bytes and every other format is a re-spelling of the same profile dict.
There is no second copy of the field names or the timeout format to drift.
"""

from __future__ import annotations

import json
import re
import shlex
from typing import Any, Callable, Dict, List, Optional, Sequence, Union

from vmss_terminate.control import body
from vmss_terminate.errors import UsageError
from vmss_terminate.iac import azure_policy, kubernetes
from vmss_terminate.timeout import parse_timeout

FORMATS = ("arm", "bicep", "terraform", "rest", "cli", "policy", "kubernetes")

# azurerm spells the two ARM fields differently inside `termination_notification { }`.
TERRAFORM_FIELDS = {"enable": "enabled", "notBeforeTimeout": "timeout"}

_RG_PLACEHOLDER = '"$RESOURCE_GROUP"'
_NAME_PLACEHOLDER = '"$VMSS_NAME"'
_BICEP_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def render(
    fmt: str,
    minutes: Union[int, str, None],
    *,
    enable: bool = True,
    resource_group: Optional[str] = None,
    name: Optional[str] = None,
    namespace: str = kubernetes.DEFAULT_NAMESPACE,
    image: str = kubernetes.DEFAULT_IMAGE,
    metrics_port: int = kubernetes.DEFAULT_PORT,
    agent_args: Sequence[str] = (),
) -> str:
    """Return the snippet for `fmt` (one of FORMATS), ending with a newline.

    `minutes` is anything `vmss_terminate.timeout.parse_timeout` accepts (10, "10m", "PT10M");
    it is required when enabling and must be None when `enable` is False. `resource_group` and
    `name` only fill in the `cli` format (shell variables are printed when they are None).
    `kubernetes` is the agent's DaemonSet with its RBAC (`iac/kubernetes.py`: `namespace`, `image`,
    `metrics_port`, `agent_args`); it takes no timeout, which is the scale set's setting.
    Raises UsageError (exit 2) for an unknown format or a bad timeout.
    """
    if fmt == "kubernetes":
        if minutes is not None or not enable:
            raise UsageError("--format kubernetes renders the agent's DaemonSet: the timeout is the scale set's "
                             "(render it with --format arm|bicep|terraform|rest|cli); give no --timeout or --disable")
        return kubernetes.render_kubernetes(namespace, image, metrics_port, agent_args)
    renderer = _RENDERERS.get(fmt)
    if renderer is None:
        raise UsageError(f"unknown format {fmt!r}: choose one of {', '.join(FORMATS)}")
    if enable and minutes is None:
        raise UsageError("a timeout is required to enable terminate notifications (5..15 minutes, e.g. 10m)")
    if not enable and minutes is not None:
        raise UsageError("a timeout makes no sense when disabling terminate notifications")
    if fmt == "policy" and not enable:
        raise UsageError("--format policy audits for enabled terminate notification: give --timeout, not --disable")
    parsed = parse_timeout(minutes) if minutes is not None else None
    return renderer(enable, parsed, resource_group, name)


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


def _bicep_entries(mapping: Dict[str, Any], depth: int) -> List[str]:
    pad = "  " * depth
    lines = []
    for key, value in mapping.items():
        label = key if _BICEP_IDENT.match(key) else _bicep_string(key)
        if isinstance(value, dict):
            lines.append(f"{pad}{label}: {{")
            lines += _bicep_entries(value, depth + 1)
            lines.append(f"{pad}}}")
        else:
            lines.append(f"{pad}{label}: {_bicep_scalar(value)}")
    return lines


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
