"""The Azure resources `central run --source queue` reads from, for one subscription: the values the
templates (templates/{bicep,arm,terraform}/eventgrid-queue*) spell out, and `render --format eventgrid`,
the same setup as Azure CLI commands.

* A storage account (StorageV2, TLS 1.2, no public blob access) with the queue, its `-poison` queue,
  the lease container (one blob lease per EventId) and the dead-letter container.
* The Event Grid system topic of the subscription, type
  `Microsoft.ResourceNotifications.MaintenanceResources`, location `global` (Learn: "az eventgrid
  system-topic create ... --location global --topic-type microsoft.resourcenotifications.MaintenanceResources
  --source /subscriptions/<SubscriptionGuid>", articles/virtual-machines/scheduled-events-event-grid.md).
* Its event subscription: destination the queue (Event Grid schema), both scheduled-event types,
  an advanced filter `subject StringContains /virtualMachineScaleSets/` (scale sets' events only),
  30 delivery attempts over 24 h, then the dead-letter container.
* Role assignments for the handler's identity: Storage Queue Data Contributor on the queue and the
  poison queue (receive, extend visibility -- Update Message --, delete, send to poison), Storage Blob
  Data Contributor on the lease container, and the built-in role for acknowledging scheduled events,
  Scheduled Events Contributor (`ACKNOWLEDGE_ROLE`), at the subscription.
"""

from __future__ import annotations

import re
import shlex
from typing import List, Optional

from vmss_terminate import scheduled_events
from vmss_terminate.errors import UsageError

TOPIC_TYPE = scheduled_events.EVENT_GRID_TOPIC_TYPE
EVENT_TYPES = scheduled_events.EVENT_GRID_TYPES
SUBJECT_FILTER = "/virtualMachineScaleSets/"
"""Advanced filter value (StringContains on the subject): only scale sets' scheduled events."""

DEFAULT_QUEUE = "scheduled-events"
POISON_SUFFIX = "-poison"
LEASE_CONTAINER = "vmss-terminate-leases"
DEAD_LETTER_CONTAINER = "scheduled-events-deadletter"
DEFAULT_TOPIC = "scheduled-events"
SUBSCRIPTION_NAME = "vmss-terminate"
MAX_DELIVERY_ATTEMPTS = 30
EVENT_TTL_MINUTES = 1440

# Built-in role definition ids (the same in every tenant).
STORAGE_QUEUE_DATA_CONTRIBUTOR = "974c5e8b-45b9-4653-ba55-5f855dd0fb88"
STORAGE_BLOB_DATA_CONTRIBUTOR = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
ACKNOWLEDGE_ROLE = "b67fe603-310e-4889-b9ee-8257d09d353d"
"""The built-in role "Scheduled Events Contributor": `Microsoft.Maintenance/scheduledevents/acknowledge/action`
and reads of VMs, scale sets and availability sets (its role definition, created 2024-04-25, as
azure-rbac-catalog.org/roles/b67fe603-310e-4889-b9ee-8257d09d353d reproduces it). Learn's "Scheduled
Events in Azure Resource Graph" calls it `ScheduledEventContributor`, but its roleName has spaces:
`--role` gets the id, the same in every tenant."""

_ACCOUNT = re.compile(r"^[a-z0-9]{3,24}$")
_QUEUE = re.compile(r"^[a-z0-9](?:[a-z0-9]|-(?=[a-z0-9])){2,62}$")
_GUID = re.compile(r"^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$")


def check(subscription: str, storage_account: str, queue: str, principal_id: Optional[str]) -> None:
    """UsageError (exit 2) for a name Azure would refuse."""
    if not _GUID.match(subscription or ""):
        raise UsageError(f"invalid --subscription {subscription!r}: a subscription id (a GUID)")
    if not _ACCOUNT.match(storage_account or ""):
        raise UsageError(f"invalid --storage-account {storage_account!r}: 3-24 lower-case letters and digits")
    if not _QUEUE.match(queue or "") or len(queue + POISON_SUFFIX) > 63:
        raise UsageError(f"invalid --queue {queue!r}: 3-56 lower-case letters, digits and single hyphens "
                         f"(its poison queue {queue}{POISON_SUFFIX} must fit 63)")
    if principal_id is not None and not _GUID.match(principal_id):
        raise UsageError(f"invalid --principal-id {principal_id!r}: the handler identity's object id (a GUID)")


def render_cli(subscription: str, resource_group: str, storage_account: str, *, queue: str = DEFAULT_QUEUE,
               location: str = "eastus", principal_id: Optional[str] = None) -> str:
    """The setup for one subscription as Azure CLI commands (run in order; each runs as printed)."""
    check(subscription, storage_account, queue, principal_id)
    q = shlex.quote
    sub, rg, acct = q(subscription), q(resource_group), q(storage_account)
    account_id = (f"/subscriptions/{subscription}/resourceGroups/{resource_group}/providers/Microsoft.Storage/"
                  f"storageAccounts/{storage_account}")
    queue_id = f"{account_id}/queueServices/default/queues/{queue}"
    lines: List[str] = [
        f"# Event Grid -> Storage queue for `vmss-terminate central run --source queue`, subscription {subscription}",
        "# 1. the storage account, the queue and its poison queue, the lease and dead-letter containers",
        f"az storage account create --subscription {sub} -g {rg} -n {acct} -l {q(location)} --sku Standard_LRS "
        "--kind StorageV2 --min-tls-version TLS1_2 --allow-blob-public-access false",
    ]
    for name in (queue, queue + POISON_SUFFIX):
        lines.append(f"az storage queue create --subscription {sub} --account-name {acct} -n {q(name)} --auth-mode login")
    for name in (LEASE_CONTAINER, DEAD_LETTER_CONTAINER):
        lines.append(f"az storage container-rm create --subscription {sub} -g {rg} --storage-account {acct} -n {q(name)}")
    lines += [
        "# 2. the subscription's system topic and its event subscription (scale sets' scheduled events only)",
        f"az eventgrid system-topic create --subscription {sub} -g {rg} -n {DEFAULT_TOPIC} -l global "
        f"--topic-type {TOPIC_TYPE} --source /subscriptions/{subscription}",
        f"az eventgrid system-topic event-subscription create --subscription {sub} -g {rg} "
        f"--system-topic-name {DEFAULT_TOPIC} -n {SUBSCRIPTION_NAME} --endpoint-type storagequeue "
        f"--endpoint {q(queue_id)} --event-delivery-schema eventgridschema "
        f"--included-event-types {' '.join(q(t) for t in EVENT_TYPES)} "
        f"--advanced-filter subject StringContains {SUBJECT_FILTER} "
        f"--max-delivery-attempts {MAX_DELIVERY_ATTEMPTS} --event-ttl {EVENT_TTL_MINUTES} "
        f"--deadletter-endpoint {q(account_id + '/blobServices/default/containers/' + DEAD_LETTER_CONTAINER)}",
    ]
    if principal_id is None:
        lines.append("# 3. role assignments: give --principal-id (the handler identity's object id) to print them")
    else:
        who = f"--assignee-object-id {q(principal_id)} --assignee-principal-type ServicePrincipal"
        lines += [
            "# 3. the handler's identity: queue and poison queue, lease blobs, acknowledging scheduled events",
            f"az role assignment create {who} --role {STORAGE_QUEUE_DATA_CONTRIBUTOR} --scope {q(queue_id)}",
            f"az role assignment create {who} --role {STORAGE_QUEUE_DATA_CONTRIBUTOR} "
            f"--scope {q(queue_id + POISON_SUFFIX)}",
            f"az role assignment create {who} --role {STORAGE_BLOB_DATA_CONTRIBUTOR} "
            f"--scope {q(account_id + '/blobServices/default/containers/' + LEASE_CONTAINER)}",
            f"az role assignment create {who} --role {ACKNOWLEDGE_ROLE} --scope /subscriptions/{subscription}",
        ]
    lines.append(f"# then run the handler with --source queue --queue-url "
                 f"https://{storage_account}.queue.core.windows.net/{queue} (docs/central.md)")
    return "\n".join(lines) + "\n"
