"""AgentConfig: every agent option in one validated object (the CLI only fills it in)."""

from __future__ import annotations

import math
import os
import re
from dataclasses import dataclass, replace
from typing import Any, Collection, FrozenSet, Optional, Sequence, Tuple

from vmss_terminate.agent.events import parse_types, same_name
from vmss_terminate.agent.hooks import redact_url
from vmss_terminate.agent.imds import check_imds_api_version, resolve_imds_url
from vmss_terminate.agent.kubernetes.rules import DEFAULT_TAINT, parse_taint
from vmss_terminate.agent.process import check_program, split_command
from vmss_terminate.errors import UsageError
from vmss_terminate.scheduled_events import DEFAULT_API_VERSION, MAX_TERMINATE_NOTICE

ON_HOOK_FAILURE = ("approve", "wait")
MAX_NOTICE = MAX_TERMINATE_NOTICE  # NotBefore is never further away than this

# Durations: (field, exclusive lower bound or None for ">= 0", upper bound, why the bound).
_DURATIONS = (
    ("poll_interval", 0, 3600.0, ""),
    ("safety_margin", None, MAX_NOTICE, ""),
    ("request_timeout", 0, 3600.0, ""),
    ("first_call_timeout", 0, 3600.0, ""),
    ("kill_grace", 0, 3600.0, ""),
    ("stop_grace", None, MAX_NOTICE, " (the longest a drain can take)"),
    ("drain_delay", None, MAX_NOTICE, " (the longest Terminate notice)"),
)
WEBHOOK_FORMATS = ("json", "slack", "teams")
NODE_NAME_ENV = "NODE_NAME"  # what a DaemonSet sets from the downward API (spec.nodeName)


@dataclass(frozen=True)
class AgentConfig:
    """Options of the in-VM agent.

    imds_url         IMDS base URL (None: $VMSS_TERMINATE_IMDS_URL or http://169.254.169.254)
    hooks            commands run (no shell) for our own events of `hook_events`, in order
    hook_events      event types the hooks (and the webhook) run for, and the drain types (/readyz
                     503), besides Terminate, which is always one (as for approve_types)
    poll_interval    seconds between Scheduled Events polls (the docs recommend 1)
    state_file       path; None = system default (fallback per user); ":memory:" = not persisted
    approve_types    types approved once hooks are done (ours only) besides Terminate; "none": nothing
    on_hook_failure  "approve" (default: the VM goes at NotBefore anyway, and an unapproved event
                     holds back other deletions) or "wait" (leave it to expire at NotBefore)
    approve_shared   approve a Terminate that also names other VMs (releases them too)
    api_version      Scheduled Events api-version, >= 2019-01-01
    safety_margin    hooks are stopped this many seconds before NotBefore (0 <= s < 900: NotBefore
                     is at most 15 minutes away, so a larger margin would leave hooks no time at all)
    stop_grace       on stop (SIGTERM), let running hooks finish this long and approve what they
                     drained before stopping the rest (0: stop them at once)
    webhook          URL POSTed with the event JSON (may use proxies; IMDS never does)
    vm_name          override compute.name (normally learnt from IMDS)
    rerun_interrupted  rerun a hook that was started but not finished when the agent died
    max_requests_per_second  client-side IMDS rate limit (IMDS allows 5/s per VM)
    drain_delay      seconds the approval waits after the drain began (/readyz 503), bounded by
                     NotBefore minus the safety margin; hooks run in parallel (0: no wait)
    webhook_format   json (a hook step: the event POSTed before approval) or slack / teams (chat
                     notifications of what the agent did; never hold the approval back)
    kubernetes       drain the Kubernetes node this VM is before approving (after the hooks; see
                     docs/kubernetes.md): cordon, taint, evict, wait for the pods to be gone
    kubeconfig       the kubeconfig for --kubernetes (None: in-cluster service account, else $KUBECONFIG)
    node_name        the node to drain (None: $NODE_NAME, else found by providerID / computer name)
    taint            KEY[=VALUE]:EFFECT added to the node with the cordon
    """

    imds_url: Optional[str] = None
    hooks: Sequence[str] = ()
    hook_events: Collection[str] = ("Terminate",)
    poll_interval: float = 1.0
    state_file: Optional[str] = None
    approve_types: Collection[str] = ()
    on_hook_failure: str = "approve"
    approve_shared: bool = False
    api_version: str = DEFAULT_API_VERSION
    safety_margin: float = 15.0
    webhook: Optional[str] = None
    vm_name: Optional[str] = None
    rerun_interrupted: bool = True
    request_timeout: float = 10.0
    first_call_timeout: float = 130.0
    kill_grace: float = 5.0
    max_requests_per_second: int = 4
    stop_grace: float = 45.0
    drain_delay: float = 0.0
    webhook_format: str = "json"
    kubernetes: bool = False
    kubeconfig: Optional[str] = None
    node_name: Optional[str] = None
    taint: str = DEFAULT_TAINT

    def validated(self) -> "AgentConfig":
        """A normalised copy; UsageError (exit 2) on any bad value, before any request."""
        for name, low, high, why in _DURATIONS:
            value = getattr(self, name)
            option = "--" + name.replace("_", "-")
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise UsageError(f"invalid {option} {value!r}: expected a number of seconds")
            if not (low < value if low is not None else value >= 0) or not value <= high:
                bounds = f"{low} < seconds" if low is not None else "0 <= seconds"
                raise UsageError(f"invalid {option} {value:g}: expected {bounds} <= {high:g}{why}")
        if self.safety_margin >= MAX_NOTICE:
            raise UsageError(f"invalid --safety-margin {self.safety_margin:g}: expected 0 <= seconds < "
                             f"{MAX_NOTICE:g} (NotBefore is at most 15 minutes away: hooks would never start)")
        if self.webhook_format not in WEBHOOK_FORMATS:
            raise UsageError(f"invalid --webhook-format {self.webhook_format!r}: use {', '.join(WEBHOOK_FORMATS)}")
        if self.on_hook_failure not in ON_HOOK_FAILURE:
            raise UsageError(f"invalid --on-hook-failure {self.on_hook_failure!r}: use approve or wait")
        if isinstance(self.max_requests_per_second, bool) or not 1 <= int(self.max_requests_per_second) <= 1000:
            raise UsageError("invalid max_requests_per_second: expected 1..1000")
        if self.webhook is not None and (not re.match(r"^https?://\S+$", self.webhook)
                                         or redact_url(self.webhook) == "<unparseable URL>"):
            # the value is shown only when it is a URL redact_url can strip of credentials and query
            shown = f" {redact_url(self.webhook)!r}" if re.match(r"^https?://[^/?#@\s]+", self.webhook) else ""
            reason = "expected an http(s) URL such as https://HOST/PATH"
            raise UsageError(f"invalid webhook{shown}: {reason}", cli_message=f"invalid --webhook{shown}: {reason}")
        if self.vm_name is not None and not self.vm_name.strip():
            raise UsageError("empty --vm-name")
        if isinstance(self.state_file, str) and not self.state_file.strip():
            raise UsageError("empty --state-file: pass a file path (or :memory: to keep state in memory only)")
        parse_taint(self.taint)
        if (self.kubeconfig is not None or self.node_name is not None) and not self.kubernetes:
            raise UsageError("--kubeconfig and --node-name apply to --kubernetes: add --kubernetes to drain the node")
        node_name = self.node_name
        if node_name is None and self.kubernetes:
            node_name = os.environ.get(NODE_NAME_ENV, "").strip() or None
        if node_name is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", node_name.strip()):
            raise UsageError(f"invalid --node-name {node_name!r}: expected a Kubernetes node name "
                             f"(a lower-case DNS name)")
        if self.kubeconfig is not None and not str(self.kubeconfig).strip():
            raise UsageError("empty --kubeconfig: pass the kubeconfig file, or leave it out for the "
                             "in-cluster service account")
        hooks: Tuple[str, ...] = tuple(self.hooks)
        for hook in hooks:
            check_program(split_command(hook))
        return replace(
            self,
            imds_url=resolve_imds_url(self.imds_url),
            hooks=hooks,
            hook_events=hook_types(self.hook_events),
            approve_types=approved_types(self.approve_types),
            api_version=check_imds_api_version(self.api_version),
            vm_name=self.vm_name.strip() if self.vm_name else None,
            node_name=node_name.strip() if node_name else None,
        )


def approved_types(value: Any) -> FrozenSet[str]:
    """The types the agent approves (only its own events): Terminate, which is the agent's job,
    plus the types named. `--approve Reboot,Redeploy` therefore still approves Terminate; an issue's
    own example would otherwise silently stop every Terminate approval. `none` alone approves nothing
    at all (observe only: every event waits for its NotBefore)."""
    names = [value] if isinstance(value, str) else list(value or ())
    if len(names) == 1 and same_name(str(names[0]).strip(), "none"):
        return frozenset()
    return frozenset(("Terminate",) + parse_types(value, "--approve"))


def hook_types(value: Any) -> FrozenSet[str]:
    """The types the hooks (and the json webhook) run for and the agent drains on: Terminate, which
    is the agent's job, plus the types named -- as `approved_types` does. `--hook X --hook-events
    Reboot` therefore still drains every Terminate; it would otherwise silently approve each one at
    once, undrained. Who wants no drain on Terminate gives no `--hook`; `none` names no extra type."""
    return frozenset(("Terminate",) + parse_types(value, "--hook-events"))
