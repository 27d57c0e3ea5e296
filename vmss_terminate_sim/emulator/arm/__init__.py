"""Local Azure Resource Manager for VM scale sets plus a managed-identity token endpoint, faithful
enough that azure-mgmt-compute, DefaultAzureCredential and the az CLI run against it unchanged.
What users import to test pipelines and autoscale handlers:

    from vmss_terminate_sim.emulator.arm import ArmState, start_arm

    state = ArmState()
    state.add_scale_set("00000000-0000-0000-0000-000000000000", "rg", "web", capacity=3)
    with start_arm(state) as arm:             # ARM + token endpoint on loopback
        arm.arm_url, arm.env                  # VMSS_TERMINATE_ARM_ENDPOINT; IDENTITY_ENDPOINT/HEADER
        ...                                   # run the control plane or the SDK against them
        arm.arm_server.log.count("PATCH")     # what was sent

`ArmState` is the inventory (subscriptions, scale sets, instances, long-running operations,
listeners); `ArmEmulator` is the HTTP app serving it (an explicit route table), `TokenEndpoint` the
App Service-style managed-identity endpoint whose tokens it accepts.
"""

from vmss_terminate_sim.emulator.arm.app import ArmEmulator, ArmServers, start_arm
from vmss_terminate_sim.emulator.arm.inventory import (
    ArmState,
    ArmStateError,
    InstanceRecord,
    ScaleSetRecord,
    ScaleSetSpec,
    SubscriptionRecord,
)
from vmss_terminate_sim.emulator.arm.token import TokenEndpoint, credential_env, identity_endpoint

__all__ = ["ArmEmulator", "ArmServers", "ArmState", "ArmStateError", "InstanceRecord", "ScaleSetRecord",
           "ScaleSetSpec", "SubscriptionRecord", "TokenEndpoint", "credential_env", "identity_endpoint", "start_arm"]
