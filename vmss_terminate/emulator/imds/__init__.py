"""Local Instance Metadata Service: Scheduled Events and instance metadata, one server per VM over
a shared placement group. What users import to test their drain hooks:

    from vmss_terminate.emulator.imds import PlacementGroup, ImdsEmulator, start_imds
"""

from vmss_terminate.emulator.imds.app import ImdsEmulator
from vmss_terminate.emulator.imds.events import Approval, EmulatedEvent, PlacementGroup
from vmss_terminate.emulator.imds.launch import start_imds

__all__ = ["Approval", "EmulatedEvent", "ImdsEmulator", "PlacementGroup", "start_imds"]
