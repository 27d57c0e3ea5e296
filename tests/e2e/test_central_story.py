"""The central handler's whole story (issue 25's done-when), no agent in any instance: a sandbox
Windows-typed scale set publishing to Resource Graph, its VMs nodes of the Kubernetes API emulator;
`vmss-terminate central run` as a process with the real azure-identity chain (the sandbox's env);
the real kubectl watching the nodes. A scale-in of 3: each removed VM gets its hook, its node
drained and its Run Command (RunPowerShellScript), then its event is acknowledged once through the
Maintenance RP, and every instance is deleted before its NotBefore."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path
from typing import Set

import pytest

from vmss_terminate.clock import ScaledClock
from vmss_terminate.control.scaleset import ScaleSetClient
from vmss_terminate_sim.sandbox.agents import demo_hook_command
from vmss_terminate_sim.sandbox.environment import Sandbox, SandboxConfig
from vmss_terminate_sim.sandbox.kubernetes import SandboxCluster

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]
SPEED = 5.0  # PT5M lasts 60 real seconds: room for a loaded machine


@pytest.mark.skipif(os.name == "nt" or shutil.which("kubectl") is None, reason="POSIX and kubectl")
def test_windows_scale_in_of_three_is_drained_and_acknowledged_from_outside(tmp_path: Path) -> None:
    script = tmp_path / "drain.ps1"
    script.write_text("Write-Host draining\n")
    config = SandboxConfig(instances=5, timeout_minutes=5, speed=SPEED, windows=True, publish_events=True,
                           imds_rate_limit=None)
    with Sandbox(config, clock=ScaledClock(speed=SPEED)) as box:
        cluster = SandboxCluster(box).start()
        try:
            # no PodDisruptionBudget here: three nodes at once would wait on the demo's budget (the agent's
            # demo covers budgets); test_handler_kubernetes drains pods for an event listing two VMs
            env = {k: v for k, v in os.environ.items() if "PROXY" not in k.upper()}
            env.update(box.env())
            env["HOME"] = str(tmp_path)
            seen: Set[str] = set()
            done = threading.Event()

            def kubectl_watching() -> None:  # the real kubectl, reading the nodes while the story runs
                while not done.is_set():
                    shown = subprocess.run(
                        ["kubectl", "--kubeconfig", cluster.kubeconfig, "get", "nodes", "--no-headers", "-o",
                         "custom-columns=NAME:.metadata.name,UNSCHEDULABLE:.spec.unschedulable"],
                        capture_output=True, text=True, env=env, timeout=60).stdout
                    seen.update(line.split()[0] for line in shown.splitlines() if line.split()[-1:] == ["true"])
                    done.wait(0.2)

            watcher = threading.Thread(target=kubectl_watching, daemon=True)
            watcher.start()
            handler = subprocess.Popen(
                [sys.executable, "-m", "vmss_terminate", "central", "run", "--subscription", config.subscription,
                 "-g", config.resource_group, "--hook", demo_hook_command(), "--kubernetes", "--kubeconfig",
                 cluster.kubeconfig, "--run-command", str(script), "--poll-interval", "0.5",
                 "--state-file", str(tmp_path / "state.json")],
                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
            try:
                with ScaleSetClient(box.connection(), config.resource_group, config.name) as client:
                    client.patch(json.dumps({"sku": {"capacity": 2}}).encode())
                removed = [d.vm_name for d in box.scheduler.deletions()]
                assert len(removed) == 3
                assert box.scheduler.wait_deleted(removed, 180), [d.explain() for d in box.scheduler.deletions()]
            finally:
                handler.terminate()
                log = handler.communicate(timeout=30)[0]
                done.set()
                watcher.join(timeout=60)
        finally:
            cluster.stop()
        acks = [a for a in box.state.maintenance.acknowledgements if a.accepted]
        commands = {r.vm_name: r for r in box.state.run_commands.records}
        for deletion in box.scheduler.deletions():
            mine = [a for a in acks if a.event_id == deletion.event_id]
            assert len(mine) == 1, log  # acknowledged exactly once, through the Maintenance RP
            assert deletion.approved_by == "Microsoft.Maintenance"
            assert deletion.start_reason.startswith("approved"), log
            assert deletion.not_before is not None and deletion.started_at is not None
            assert deletion.started_at < deletion.not_before  # deleted before its NotBefore
            command = commands[deletion.vm_name]
            assert command.command_id == "RunPowerShellScript" and command.script == ["Write-Host draining"]
            assert command.at <= mine[0].at  # the Run Command came before the acknowledgement
        assert len(acks) == 3 and box.state.maintenance.foreign_acknowledgements() == []
        assert log.count("hook#1") >= 3 and "acknowledged" in log
        assert len(seen) == 3, log  # kubectl saw each removed VM's node cordoned, no other
