"""The local sandbox: ARM and per-instance IMDS emulators linked the way Azure links them, so a
scale-in produces Terminate events, agents drain and approve, and instances are deleted by
Azure's documented rules -- on a clock that can run a PT5M timeout in seconds.

    from vmss_terminate.sandbox import Sandbox, SandboxConfig, AgentFleet, run_demo, DemoOptions

    with Sandbox(SandboxConfig(instances=4, timeout_minutes=5, speed=60)) as sb:
        with sb.azure_env():                       # DefaultAzureCredential -> the sandbox
            ...                                    # control plane against sb.connection()
        with AgentFleet(sb, hooks=["drain.sh"]):   # one real agent per instance
            ...
        print("\\n".join(sb.report()))             # why each deletion happened when it did

`run_demo()` is `vmss-terminate demo` as a function.
"""

from importlib import import_module
from typing import Any

# Loaded on first use (PEP 562): `python -m vmss_terminate.sandbox.demo_hook`, which every demo
# instance runs per deletion, must not pay for the emulators, the agent and the Azure SDK.
_HOMES = {
    "DemoOptions": "demo", "DemoResult": "demo", "run_demo": "demo",
    "Sandbox": "environment", "SandboxConfig": "environment", "notification_timeout": "environment",
    "AgentFleet": "fleet", "demo_hook_command": "fleet",
    "Deletion": "scheduler", "DeletionScheduler": "scheduler", "plan": "scheduler",
    "Entry": "timeline", "Timeline": "timeline", "format_entry": "timeline",
}

__all__ = sorted(_HOMES)


def __getattr__(name: str) -> Any:
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(f"{__name__}.{_HOMES[name]}"), name)
