"""AgentConfig: every agent option in one validated object, and the one place each is declared.

Each field that is an `agent run` option is declared with `option(default, help=...)`
(`vmss_terminate/params.py`): its name, default, type and help are written there and nowhere else.
The click command (`commands/agent.py`, `--help`, docs/cli-reference.md) and the click-free parser
that starts the agent (`agent/command.py`) are both generated from these fields, and `run(config)`
takes the object they fill in.

Adding an option is one field here:

    kill_grace: float = seconds(5.0, 0, 3600.0, help="...", metavar="S", show_default=True)

gives `--kill-grace S` to both parsers, the reference and `AgentConfig(kill_grace=...)`;
`seconds(...)` also bounds the value in `validated()` (`option(...)` for anything else: a flag
from a bool default, a choice from `choices=`, text otherwise; `flags=` when the flag is not the
field's name, as `--hook`, `--approve` and `--no-rerun-interrupted`). Checks beyond a range are
one entry in `CHECKS` (field -> check returning the normalised value). Then regenerate docs/cli-reference.md (`python -m vmss_terminate.cli > docs/cli-reference.md`).
Options of the `run` command itself rather than of the agent (`--listen`, `--once`, ...) are
fields of `agent/command.py`'s `RunOptions`, declared the same way.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re
from dataclasses import dataclass, replace
from typing import Any, Callable, Collection, Dict, FrozenSet, Mapping, Optional, Sequence, Tuple

from vmss_terminate.agent.imds import check_imds_api_version, resolve_imds_url
from vmss_terminate.errors import UsageError
from vmss_terminate.params import option, options_of, with_metadata
from vmss_terminate.pipeline.events import parse_types, same_name
from vmss_terminate.pipeline.hooks import redact_url
from vmss_terminate.pipeline.kubernetes.rules import DEFAULT_TAINT, parse_taint
from vmss_terminate.pipeline.process import check_program, split_command
from vmss_terminate.scheduled_events import DEFAULT_API_VERSION, MAX_TERMINATE_NOTICE, vm_name_problem

ON_HOOK_FAILURE = ("approve", "wait")
MAX_NOTICE = MAX_TERMINATE_NOTICE  # NotBefore is never further away than this
WEBHOOK_FORMATS = ("json", "slack", "teams")
NODE_NAME_ENV = "NODE_NAME"  # what a DaemonSet sets from the downward API (spec.nodeName)
_SECONDS = "vmss_terminate.seconds"


def seconds(default: float, low: Optional[float], high: float, why: str = "", **declared: Any) -> Any:
    """A duration field: `low < value <= high` (`low` None: `0 <= value`) checked by `validated()`,
    `why` said after the bound; with `help=` it is also an option (`option()`'s keywords)."""
    bounds = {_SECONDS: (low, high, why)}
    if "help" in declared:
        return with_metadata(option(default, **declared), bounds)
    return dataclasses.field(default=default, metadata=bounds)


KUBERNETES_ONLY = {"kubeconfig": "--kubeconfig", "node_name": "--node-name", "taint": "--taint"}


def refuse_without_kubernetes(named: Collection[str], kubernetes: bool) -> None:
    """UsageError (exit 2) when options that only the node drain reads (`named`: field names, e.g.
    the options a command line named, even at their default) come without `--kubernetes`."""
    flags = [flag for dest, flag in KUBERNETES_ONLY.items() if dest in named]
    if flags and not kubernetes:
        raise UsageError(f"{' and '.join(flags)} appl{'ies' if len(flags) == 1 else 'y'} to --kubernetes: "
                         f"add --kubernetes to drain the node")


@dataclass(frozen=True)
class AgentConfig:
    """Options of the in-VM agent (each option's meaning is its `help`; see the module docstring).

    Python-only field: `max_requests_per_second` (the client-side IMDS rate limit; IMDS allows 5/s
    per VM).
    `state_file` ":memory:" keeps state in memory only.
    """

    imds_url: Optional[str] = option(
        metavar="URL", help="IMDS base URL [env VMSS_TERMINATE_IMDS_URL; default http://169.254.169.254].")
    hooks: Sequence[str] = option(
        (), flags=("--hook",), multiple=True, metavar="CMD",
        help="Command run (no shell) for our own events, in order; repeatable. Event data in "
             "VMSS_TERMINATE_* env vars and the event JSON on stdin.")
    hook_events: Collection[str] = option(
        "Terminate", show_default=True, metavar="TYPES",
        help="Event types the hooks and the webhook run for, and /readyz drains on, besides Terminate, "
             "which is always one (comma list, 'all').")
    webhook: Optional[str] = option(metavar="URL", help="POST each such event as JSON to URL (may use proxies).")
    webhook_format: str = option(
        "json", choices=WEBHOOK_FORMATS, show_default=True,
        help="json: the event, as a hook step before approval; slack / teams: incoming-webhook chat "
             "messages of what the agent did (draining, hook failed, approved), never delaying it.")
    drain_delay: float = seconds(
        0.0, None, MAX_NOTICE, " (the longest Terminate notice)", show_default=True, metavar="S",
        help="Approve at least S seconds after /readyz turned 503 (hooks run meanwhile), but no later "
             "than NotBefore minus --safety-margin.")
    poll_interval: float = seconds(
        1.0, 0, 3600.0, show_default=True, metavar="S",
        help="Seconds between Scheduled Events polls (the docs recommend 1).")
    state_file: Optional[str] = option(
        metavar="PATH",
        help="Default /var/lib/vmss-terminate/state.json (%ProgramData%\\vmss-terminate on Windows).")
    approve_types: Collection[str] = option(
        (), flags=("--approve",), metavar="TYPES",
        help="Event types approved (ours only) after hooks besides Terminate, which is always approved: "
             "comma list, e.g. Reboot,Redeploy; 'none' approves nothing (observe only).")
    approve_shared: bool = option(
        False, help="Also approve an event of ours that names other VMs too (releases them before they drain).")
    on_hook_failure: str = option(
        "approve", choices=ON_HOOK_FAILURE, show_default=True,
        help="approve: approve anyway (the VM goes at NotBefore regardless); wait: let NotBefore expire.")
    safety_margin: float = seconds(
        15.0, None, MAX_NOTICE, show_default=True, metavar="S",
        help="Stop hooks this many seconds before NotBefore (0 <= S < 900).")
    stop_grace: float = seconds(
        45.0, None, MAX_NOTICE, " (the longest a drain can take)", show_default=True, metavar="S",
        help="On SIGTERM / Ctrl-C, let running hooks finish this long and approve what they drained, "
             "then stop the rest (they rerun on restart); 0 stops them at once.")
    rerun_interrupted: bool = option(
        True, flags=("--no-rerun-interrupted",),
        help="After a crash, do not rerun a hook that was started but not finished (treat it as failed).")
    api_version: str = option(
        DEFAULT_API_VERSION, show_default=True,
        help="Scheduled Events api-version (>= 2019-01-01, the first with Terminate), or "
             "'latest': the newest IMDS serves, asked at start.")
    vm_name: Optional[str] = option(metavar="NAME", help="This VM's name (default: instance metadata compute.name).")
    request_timeout: float = seconds(10.0, 0, 3600.0, show_default=True, metavar="S",
                                     help="Read timeout of each IMDS request.")
    first_call_timeout: float = seconds(
        130.0, 0, 3600.0, show_default=True, metavar="S",
        help="Read timeout of the first Scheduled Events call (IMDS may take 2 minutes to enable).")
    kill_grace: float = seconds(
        5.0, 0, 3600.0, show_default=True, metavar="S",
        help="A hook stopped (at its deadline, or when --stop-grace ends) gets SIGTERM, then SIGKILL "
             "after S seconds, with its whole process tree.")
    max_requests_per_second: int = 4
    kubernetes: bool = option(
        False, help="Drain the Kubernetes node this VM is before approving, after the hooks: cordon, taint, "
                    "evict its pods (PodDisruptionBudgets respected; DaemonSet and mirror pods stay) and wait "
                    "until they are gone, within the hooks' deadline (docs/kubernetes.md).")
    kubeconfig: Optional[str] = option(
        kind="file", metavar="FILE",
        help="--kubernetes: the cluster and credentials (token or client certificate) [default: the "
             "in-cluster service account, else $KUBECONFIG].")
    node_name: Optional[str] = option(
        metavar="NAME", help="--kubernetes: the node to drain [env NODE_NAME; default: the node whose "
                             "spec.providerID is this VM, else the one named like its computer name].")
    taint: str = option(
        DEFAULT_TAINT, metavar="KEY[=VALUE]:EFFECT", show_default=True,
        help="--kubernetes: the taint added with the cordon (removed again if the Terminate is cancelled).")

    def validated(self) -> "AgentConfig":
        """A normalised copy; UsageError (exit 2) on any bad value, before any request. Each field
        is checked by its entry in `CHECKS` (durations by their `seconds(...)` bounds), in that order."""
        _check_safety_margin(self.safety_margin)
        for field in dataclasses.fields(self):
            if _SECONDS in field.metadata:
                _check_seconds(field.name, getattr(self, field.name), *field.metadata[_SECONDS])
        return replace(self, **{name: check(self, getattr(self, name)) for name, check in CHECKS.items()})

    @property
    def option_names(self) -> Mapping[str, str]:
        """Each field's flag, from its declaration (`policy.Settings.option_names`)."""
        return _OPTION_NAMES


_OPTION_NAMES: Mapping[str, str] = {declared.dest: declared.flag for declared in options_of(AgentConfig)}


# -- the per-field checks `validated()` reads: each returns the field's normalised value ------------

Check = Callable[[AgentConfig, Any], Any]


def _check_safety_margin(margin: Any) -> None:
    if isinstance(margin, (int, float)) and not isinstance(margin, bool) and MAX_NOTICE <= margin < math.inf:
        raise UsageError(f"invalid --safety-margin {margin:g}: expected 0 <= seconds < {MAX_NOTICE:g} "
                         f"(NotBefore is at most 15 minutes away: hooks would never start)")


def _check_seconds(name: str, value: Any, low: Optional[float], high: float, why: str) -> None:
    flag = "--" + name.replace("_", "-")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise UsageError(f"invalid {flag} {value!r}: expected a number of seconds")
    if not (low < value if low is not None else value >= 0) or not value <= high:
        bounds = f"{low} < seconds" if low is not None else "0 <= seconds"
        raise UsageError(f"invalid {flag} {value:g}: expected {bounds} <= {high:g}{why}")


def _choice(flag: str, allowed: Tuple[str, ...], say: str) -> Check:
    def check(config: AgentConfig, value: Any) -> Any:
        if value not in allowed:
            raise UsageError(f"invalid {flag} {value!r}: use {say}")
        return value
    return check


def _check_rate(config: AgentConfig, value: Any) -> Any:
    if isinstance(value, bool) or not 1 <= int(value) <= 1000:
        raise UsageError("invalid max_requests_per_second: expected 1..1000")
    return value


def _check_webhook(config: AgentConfig, value: Optional[str]) -> Optional[str]:
    if value is not None and (not re.match(r"^https?://\S+$", value) or redact_url(value) == "<unparseable URL>"):
        # the value is shown only when it is a URL redact_url can strip of credentials and query
        shown = f" {redact_url(value)!r}" if re.match(r"^https?://[^/?#@\s]+", value) else ""
        reason = "expected an http(s) URL such as https://HOST/PATH"
        raise UsageError(f"invalid webhook{shown}: {reason}", cli_message=f"invalid --webhook{shown}: {reason}")
    return value


def _check_vm_name(config: AgentConfig, value: Optional[str]) -> Optional[str]:
    if value is not None and not value.strip():
        raise UsageError("empty --vm-name")
    if value is not None:
        problem = vm_name_problem(value.strip())
        if problem:
            raise UsageError(f"invalid --vm-name {value!r}: {problem}")
    return value.strip() if value else None


def _check_state_file(config: AgentConfig, value: Optional[str]) -> Optional[str]:
    if isinstance(value, str) and not value.strip():
        raise UsageError("empty --state-file: pass a file path (or :memory: to keep state in memory only)")
    return value


def _check_taint(config: AgentConfig, value: str) -> str:
    parse_taint(value)
    return value


def _check_node_name(config: AgentConfig, value: Optional[str]) -> Optional[str]:
    """Also refuses the drain's options without --kubernetes (before their own checks), and reads
    NODE_NAME when --kubernetes comes without --node-name."""
    set_here = {"kubeconfig": config.kubeconfig, "node_name": value,
                "taint": None if config.taint == DEFAULT_TAINT else config.taint}  # the CLI also checks what it named
    refuse_without_kubernetes([dest for dest, given in set_here.items() if given is not None], config.kubernetes)
    if value is None and config.kubernetes:
        value = os.environ.get(NODE_NAME_ENV, "").strip() or None
    if value is not None and not re.fullmatch(r"[a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?", value.strip()):
        raise UsageError(f"invalid --node-name {value!r}: expected a Kubernetes node name (a lower-case DNS name)")
    return value.strip() if value else None


def _check_kubeconfig(config: AgentConfig, value: Optional[str]) -> Optional[str]:
    if value is not None and not str(value).strip():
        raise UsageError("empty --kubeconfig: pass the kubeconfig file, or leave it out for the "
                         "in-cluster service account")
    return value


def _check_hooks(config: AgentConfig, value: Sequence[str]) -> Tuple[str, ...]:
    hooks = tuple(value)
    for hook in hooks:
        check_program(split_command(hook))
    return hooks


CHECKS: Dict[str, Check] = {
    "webhook_format": _choice("--webhook-format", WEBHOOK_FORMATS, ", ".join(WEBHOOK_FORMATS)),
    "on_hook_failure": _choice("--on-hook-failure", ON_HOOK_FAILURE, "approve or wait"),
    "max_requests_per_second": _check_rate,
    "webhook": _check_webhook,
    "vm_name": _check_vm_name,
    "state_file": _check_state_file,
    "taint": _check_taint,
    "node_name": _check_node_name,
    "kubeconfig": _check_kubeconfig,
    "hooks": _check_hooks,
    "imds_url": lambda config, value: resolve_imds_url(value),
    "hook_events": lambda config, value: hook_types(value),
    "approve_types": lambda config, value: approved_types(value),
    "api_version": lambda config, value: check_imds_api_version(value),
}
"""Field -> its check, in the order bad values are reported (durations first, see `validated`)."""


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
