"""The local sandbox: ARM and per-instance IMDS emulators linked the way Azure links them, so a
scale-in produces Terminate events, agents drain and approve, and instances are deleted by
Azure's documented rules -- on a clock that can run a PT5M timeout in seconds.

    from vmss_terminate_sim.sandbox import Sandbox, SandboxConfig, SandboxAgents, run_demo, DemoOptions

    with Sandbox(SandboxConfig(instances=4, timeout_minutes=5, speed=60)) as sb:
        enable("rg", "myvmss", 10, connection=sb.connection())  # carries the sandbox's credential
        with SandboxAgents(sb, hooks=["drain.sh"]):   # one real agent per instance
            ...
        with SandboxCluster(sb) as cluster:        # the VMs as Kubernetes nodes (agents: --kubernetes)
            ...
        print("\\n".join(sb.report()))             # why each deletion happened when it did

`run_demo()` is `vmss-terminate demo` as a function.
"""

from vmss_terminate_sim.sandbox.agents import SandboxAgents, demo_hook_command
from vmss_terminate_sim.sandbox.demo import DemoOptions, DemoResult, run_demo
from vmss_terminate_sim.sandbox.environment import Sandbox, SandboxConfig, notification_timeout
from vmss_terminate_sim.sandbox.kubernetes import SandboxCluster
from vmss_terminate_sim.sandbox.scheduler import Deletion, DeletionPlan, DeletionScheduler, plan_deletions
from vmss_terminate_sim.sandbox.timeline import Entry, Timeline, format_entry

__all__ = [
    "Deletion", "DeletionPlan", "DeletionScheduler", "DemoOptions", "DemoResult", "Entry", "Sandbox",
    "SandboxAgents", "SandboxCluster", "SandboxConfig", "Timeline", "demo_hook_command", "format_entry", "notification_timeout",
    "plan_deletions", "run_demo",
]
