"""A generated estate for the ARM emulator: N scale sets across M subscriptions, in a deterministic
mix of the states a fleet audit tells apart (seed key `"generate"`, CLI `--generate N/M`).

    {"generate": {"scaleSets": 200, "subscriptions": 5, "capacity": 20, "resourceGroups": 4,
                  "special": true}}

Why deterministic (index-based, no RNG): benchmarks and tests compare runs and count findings.
Scale set i lives in subscription `i % M` (ids `00000000-0000-0000-0000-0000000000NN`, display
names "Fleet subscription NN"), resource group `rg-fleet-{i // M % resourceGroups}` and is named
`vmss-{i:04d}`. Its terminate-notification state cycles through: never configured, disabled
(`{}`), enabled PT10M (current), enabled PT5M, enabled PT10M with a quarter of the instances on an
older model (cycling within each subscription). With `special` (default), every 20th set of a
subscription is Spot, every 20th (offset 5) carries an
`aks-managed-poolName` tag, every 20th (offset 10) has scaleInPolicy.forceDeletion and every 20th
(offset 15) automaticRepairsPolicy.enabled; every 3rd (offset 2) has a scheduledEventsPolicy that
publishes to Event Grid and Resource Graph and auto-approves user reboots.

Bounded: at most MAX_SCALE_SETS sets, MAX_SUBSCRIPTIONS subscriptions and MAX_INSTANCES instances
in all (ValueError past them; the CLI exits 2), since the estate lives in memory.
"""

from __future__ import annotations

from typing import Any, Dict, List, Mapping

ENABLED_10 = {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT10M"}}
ENABLED_5 = {"terminateNotificationProfile": {"enable": True, "notBeforeTimeout": "PT5M"}}
STATES = ("absent", "disabled", "enabled-current", "enabled-5m", "enabled-stale")
PUBLISHING = {"scheduledEventsAdditionalPublishingTargets": {"eventGridAndResourceGraph": {"enable": True}},
              "userInitiatedReboot": {"automaticallyApprove": True}}
# Upper bounds: a generated estate lives in the emulator's memory (~2 KB per instance); the fleet
# benchmark's largest estate is 10,000 sets x 4 instances.
MAX_SCALE_SETS = 20000
MAX_SUBSCRIPTIONS = 1000
MAX_INSTANCES = 200000


def subscription_id(index: int) -> str:
    return f"00000000-0000-0000-0000-{index + 1:012d}"


def generate(config: Mapping[str, Any]) -> Dict[str, Any]:
    """A seed dict (`subscriptions` + `scaleSets`) for the `generate` config."""
    count = int(config.get("scaleSets", 20))
    subs = int(config.get("subscriptions", 1))
    capacity = int(config.get("capacity", 4))
    groups = max(1, int(config.get("resourceGroups", 2)))
    special = bool(config.get("special", True))
    if count < 0 or subs < 1 or capacity < 0:
        raise ValueError("generate: scaleSets >= 0, subscriptions >= 1 and capacity >= 0 are required")
    if count > MAX_SCALE_SETS or subs > MAX_SUBSCRIPTIONS or count * capacity > MAX_INSTANCES:
        raise ValueError(f"generate: at most {MAX_SCALE_SETS:,} scale sets, {MAX_SUBSCRIPTIONS:,} subscriptions and "
                         f"{MAX_INSTANCES:,} instances in all (asked: {count:,} sets, {subs:,} subscriptions, "
                         f"{count * capacity:,} instances): the emulator holds the estate in memory")
    subscriptions = [{"subscriptionId": subscription_id(s), "displayName": f"Fleet subscription {s + 1:02d}"}
                     for s in range(subs)]
    scale_sets: List[Dict[str, Any]] = []
    for i in range(count):
        entry: Dict[str, Any] = {
            "subscription": subscription_id(i % subs),
            "resourceGroup": f"rg-fleet-{i // subs % groups}",
            "name": f"vmss-{i:04d}",
            "capacity": capacity,
            "tags": {"env": "prod" if i // subs % 2 == 0 else "dev"},
        }
        j = i // subs  # the set's index within its subscription: every subscription gets the same mix
        state = STATES[j % len(STATES)]
        if state == "disabled":
            entry["scheduledEventsProfile"] = {}
        elif state == "enabled-current":
            entry["scheduledEventsProfile"] = ENABLED_10
        elif state == "enabled-5m":
            entry["scheduledEventsProfile"] = ENABLED_5
        elif state == "enabled-stale":
            entry["scheduledEventsProfile"] = ENABLED_10
            entry["staleInstances"] = max(1, capacity // 4) if capacity else 0
            entry["staleProfile"] = ENABLED_5
        if special:
            if j % 20 == 0:
                entry["priority"] = "Spot"
            if j % 20 == 5:
                entry["tags"]["aks-managed-poolName"] = "nodepool1"
            if j % 20 == 10:
                entry["scaleInPolicy"] = {"rules": ["Default"], "forceDeletion": True}
            if j % 20 == 15:
                entry["automaticRepairsPolicy"] = {"enabled": True, "gracePeriod": "PT10M"}
            if j % 3 == 2:
                entry["scheduledEventsPolicy"] = PUBLISHING
        scale_sets.append(entry)
    return {"subscriptions": subscriptions, "scaleSets": scale_sets}
