"""Local Azure Resource Manager for VM scale sets plus a managed-identity token endpoint, faithful
enough that azure-mgmt-compute and DefaultAzureCredential run against it unchanged:

    from vmss_terminate.emulator.arm import ArmState, start_arm
"""

from vmss_terminate.emulator.arm.app import ArmEmulator, ArmServers, start_arm
from vmss_terminate.emulator.arm.inventory import ArmState, InstanceRecord, ScaleSetRecord
from vmss_terminate.emulator.arm.token import TokenEndpoint, credential_env

__all__ = ["ArmEmulator", "ArmServers", "ArmState", "InstanceRecord", "ScaleSetRecord", "TokenEndpoint",
           "credential_env", "start_arm"]
