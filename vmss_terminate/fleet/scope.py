"""Which scale sets a fleet command works on, and the Resource Graph query that selects them.

The query is built from a fixed template (the forms the ARM emulator documents in
`emulator/arm/resourcegraph.py`); user values only ever appear as quoted, escaped KQL strings.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from vmss_terminate.control.names import check_resource_group
from vmss_terminate.errors import UsageError

SCALE_SET_TYPE = "microsoft.compute/virtualmachinescalesets"
VM_TYPE = "microsoft.compute/virtualmachinescalesets/virtualmachines"
PROJECTION: Tuple[Tuple[str, str], ...] = (
    ("id", "id"),
    ("name", "name"),
    ("subscriptionId", "subscriptionId"),
    ("resourceGroup", "resourceGroup"),
    ("location", "location"),
    ("tags", "tags"),
    ("capacity", "sku.capacity"),
    ("orchestrationMode", "properties.orchestrationMode"),
    ("upgradeMode", "properties.upgradePolicy.mode"),
    ("maxBatchInstancePercent", "properties.upgradePolicy.rollingUpgradePolicy.maxBatchInstancePercent"),
    ("scheduledEventsProfile", "properties.virtualMachineProfile.scheduledEventsProfile"),
    ("priority", "properties.virtualMachineProfile.priority"),
    ("forceDeletion", "properties.scaleInPolicy.forceDeletion"),
    ("automaticRepairs", "properties.automaticRepairsPolicy.enabled"),
    ("scheduledEventsPolicy", "properties.scheduledEventsPolicy"),  # the policy audit's (issue 24)
)
"""The one list of what an audit reads of a scale set: (column, its path in the resource). The
query projects exactly these (a row is ~0.3 KB instead of the whole model's ~1.9 KB) and
`records.parse_row` reads these columns; a new field is one line here plus its reader."""
_GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")
_NAME_GLOB = re.compile(r"^[A-Za-z0-9_.\-*?\[\]!]+$")


def is_subscription_id(text: str) -> bool:
    return bool(_GUID.match(text.strip()))


@dataclass(frozen=True)
class Scope:
    """Scope (subscriptions by id or display name, management groups; neither = every subscription
    the credential sees) and selectors (resource groups, tags that must all match, a name glob)."""

    subscriptions: Tuple[str, ...] = ()
    management_groups: Tuple[str, ...] = ()
    resource_groups: Tuple[str, ...] = ()
    tags: Tuple[Tuple[str, str], ...] = ()
    name: Optional[str] = None

    @classmethod
    def build(cls, subscriptions: Sequence[str] = (), management_groups: Sequence[str] = (),
              resource_groups: Sequence[str] = (), tags: Sequence[str] = (), name: Optional[str] = None) -> "Scope":
        """Validate CLI-style input (`--tag KEY=VALUE`); UsageError (exit 2) on bad input."""
        pairs = []
        for tag in tags:
            key, sep, value = tag.partition("=")
            if not sep or not key.strip():
                raise UsageError(f"invalid --tag {tag!r}: use KEY=VALUE")
            if not value:
                raise UsageError(f"invalid --tag {tag!r}: give the value (KEY=VALUE); values are matched exactly")
            pairs.append((key.strip(), value))
        groups = tuple(check_resource_group(group) for group in resource_groups)
        if name is not None and not _NAME_GLOB.match(name):
            raise UsageError(f"invalid --name {name!r}: a scale set name or glob (letters, digits, _ . - * ? [])")
        for sub in subscriptions:
            if not sub.strip():
                raise UsageError("invalid --subscription '': give a subscription id or display name")
        for group in management_groups:
            if not str(group).strip():
                raise UsageError("invalid --management-group '': give a management group id (its name, "
                                 "not its display name)")
        return cls(tuple(s.strip() for s in subscriptions), tuple(management_groups), groups, tuple(pairs), name)

    def query(self) -> str:
        """The Resource Graph query for this scope's selectors."""
        lines = ["resources", f"| where type =~ {kql_string(SCALE_SET_TYPE)}"]
        lines += self._group_filters()
        # tags are matched by `selects_tags` on the rows: Azure tag names are case-insensitive and
        # values case-sensitive, and KQL's `tags['KEY']` looks names up case-sensitively
        if self.name:
            lines.append(f"| where name matches regex {kql_string(glob_to_regex(self.name))}")
        lines.append("| project " + ", ".join(name if name == path else f"{name} = {path}" for name, path in PROJECTION))
        lines.append("| order by id asc")
        return "\n".join(lines)

    def stale_summary_query(self) -> str:
        """The Resource Graph query counting, per Uniform scale set in this scope's resource groups,
        its VMs, those that report latestModelApplied and those on an older model (fleet/stale.py)."""
        lines = ["computeresources", f"| where type =~ {kql_string(VM_TYPE)}"]
        lines += self._group_filters()
        lines += [
            "| extend scaleSetId = tolower(extract('(?i)^(.*)/virtualmachines/[^/]+$', 1, id))",
            "| extend latestModelApplied = tobool(properties.latestModelApplied)",
            "| summarize instances = count(), reported = countif(isnotnull(latestModelApplied)), "
            "stale = countif(latestModelApplied == false) by id = scaleSetId",
            "| order by id asc",
        ]
        return "\n".join(lines)

    def _group_filters(self) -> List[str]:
        if len(self.resource_groups) == 1:
            return [f"| where resourceGroup =~ {kql_string(self.resource_groups[0])}"]
        if self.resource_groups:
            return [f"| where resourceGroup in~ ({', '.join(kql_string(g) for g in self.resource_groups)})"]
        return []

    def selects_tags(self, tags: Mapping[str, Any]) -> bool:
        """Every `--tag KEY=VALUE` matches: names case-insensitively (as Azure treats tag names),
        values exactly (Azure keeps their case: `env=Prod` must not select `prod`)."""
        names = {str(name).lower(): str(value) for name, value in tags.items()}
        return all(names.get(key.lower()) == value for key, value in self.tags)

    def describe(self) -> Dict[str, object]:
        return {"subscriptions": list(self.subscriptions), "management_groups": list(self.management_groups),
                "resource_groups": list(self.resource_groups), "tags": dict(self.tags), "name": self.name}


def kql_string(value: str) -> str:
    """A single-quoted KQL string literal."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def glob_to_regex(glob: str) -> str:
    """`web-*` -> `(?i)^web\\-.*$` (scale set names are case-insensitive in ARM)."""
    out, i = [], 0
    while i < len(glob):
        char = glob[i]
        if char == "*":
            out.append(".*")
        elif char == "?":
            out.append(".")
        elif char == "[":
            end = glob.find("]", i + 1)
            if end == -1:
                raise UsageError(f"invalid --name {glob!r}: unclosed [")
            body = glob[i + 1:end]
            negate = body.startswith("!")
            body = re.sub(r"[\\\]^]", lambda m: "\\" + m.group(0), body[1:] if negate else body)
            out.append(f"[{'^' if negate else ''}{body}]")
            i = end
        else:
            out.append(re.escape(char))
        i += 1
    return "(?i)^" + "".join(out) + "$"
