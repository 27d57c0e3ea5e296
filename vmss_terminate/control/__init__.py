"""Control plane: enable, disable, retime, status, plan and upgrade of scale sets through ARM.

Azure SDK modules are imported lazily inside the functions that talk to ARM, so that
`vmss_terminate.control.body` (used by `render`) and this package stay cheap to import.
The public API (documented in docs/control-plane.md):

    status, plan, enable, disable, retime, upgrade      -> result objects with to_dict()
    Connection                                         -> where/as whom to talk to ARM
    ComputeClient                                      -> one subscription's client, shared by many sets
    UpgradeOptions, BatchSize                          -> how to upgrade instances afterwards
    PolicyChange, PolicyState                          -> the top-level scheduledEventsPolicy (asked / as read)
"""

from __future__ import annotations

from vmss_terminate.control.api import disable, enable, plan, retime, status, upgrade
from vmss_terminate.control.connection import CLOUDS, Connection
from vmss_terminate.control.events_policy import PolicyChange, PolicyState
from vmss_terminate.control.results import ChangeResult, Plan, StatusResult
from vmss_terminate.control.scaleset import ComputeClient
from vmss_terminate.control.upgrade import BatchSize, UpgradeIncomplete, UpgradeOptions, UpgradeResult

__all__ = [
    "CLOUDS",
    "BatchSize",
    "ChangeResult",
    "ComputeClient",
    "Connection",
    "Plan",
    "PolicyChange",
    "PolicyState",
    "StatusResult",
    "UpgradeIncomplete",
    "UpgradeOptions",
    "UpgradeResult",
    "disable",
    "enable",
    "plan",
    "retime",
    "status",
    "upgrade",
]
