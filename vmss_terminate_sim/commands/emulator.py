"""`vmss-terminate emulator imds|kube|arm`: run a local emulator in the foreground.

The IMDS and Kubernetes emulators are stdlib and come with the lean install (to try hooks and the
node drain on any machine); the ARM emulator is part of the `[control]` extra, like the control
plane it stands in front of.
"""

from __future__ import annotations

import click

from vmss_terminate.commands.lazy import Lazy, LazyGroup
from vmss_terminate.extras import CONTROL

COMMANDS = {
    "imds": Lazy("vmss_terminate_sim.commands.emulator_imds", "imds_command",
                 "Run a local IMDS (scheduled events + instance metadata) until Ctrl-C."),
    "kube": Lazy("vmss_terminate_sim.commands.emulator_kube", "kube_command",
                 "Serve a local Kubernetes API (nodes, pods, evictions, PodDisruptionBudgets) until Ctrl-C."),
    "arm": Lazy("vmss_terminate_sim.commands.emulator_arm", "arm_command",
                "Serve a local Azure Resource Manager for scale sets, plus a token endpoint for "
                "DefaultAzureCredential (App Service managed identity).", CONTROL),
}


@click.group(cls=LazyGroup, lazy=COMMANDS)
def emulator() -> None:
    """Run a local emulator of an Azure endpoint or the Kubernetes API (for testing hooks and pipelines)."""
