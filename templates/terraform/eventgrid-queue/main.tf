# Scheduled events pushed by Event Grid into a Storage queue, for `vmss-terminate central run --source queue`
# (docs/central.md). The same resources as templates/bicep/eventgrid-queue.bicep.

data "azurerm_subscription" "current" {}

locals {
  lease_container_name       = "vmss-terminate-leases"
  dead_letter_container_name = "scheduled-events-deadletter"
  scheduled_event_types = [
    "Microsoft.ResourceNotifications.MaintenanceResources.ScheduledEventEmitted",
    "microsoft.maintenance/scheduledevents/write",
  ]
  storage_queue_data_contributor = "974c5e8b-45b9-4653-ba55-5f855dd0fb88"
  storage_blob_data_contributor  = "ba92f5b4-2d11-453d-a403-e96b0029c9fe"
  assign                         = var.handler_principal_id != ""
}

resource "azurerm_storage_account" "events" {
  name                            = var.storage_account_name
  resource_group_name             = var.resource_group_name
  location                        = var.location
  account_tier                    = "Standard"
  account_replication_type        = "LRS"
  account_kind                    = "StorageV2"
  min_tls_version                 = "TLS1_2"
  allow_nested_items_to_be_public = false
  https_traffic_only_enabled      = true
}

resource "azurerm_storage_queue" "events" {
  name                 = var.queue_name
  storage_account_name = azurerm_storage_account.events.name
}

resource "azurerm_storage_queue" "poison" {
  name                 = "${var.queue_name}-poison"
  storage_account_name = azurerm_storage_account.events.name
}

resource "azurerm_storage_container" "leases" {
  name                 = local.lease_container_name
  storage_account_name = azurerm_storage_account.events.name
}

resource "azurerm_storage_container" "dead_letter" {
  name                 = local.dead_letter_container_name
  storage_account_name = azurerm_storage_account.events.name
}

resource "azurerm_eventgrid_system_topic" "scheduled_events" {
  name                = var.system_topic_name
  resource_group_name = var.resource_group_name
  location            = "global"
  source_resource_id  = data.azurerm_subscription.current.id
  topic_type          = "Microsoft.ResourceNotifications.MaintenanceResources"
}

resource "azurerm_eventgrid_system_topic_event_subscription" "vmss_terminate" {
  name                  = "vmss-terminate"
  system_topic          = azurerm_eventgrid_system_topic.scheduled_events.name
  resource_group_name   = var.resource_group_name
  event_delivery_schema = "EventGridSchema"
  included_event_types  = local.scheduled_event_types

  storage_queue_endpoint {
    storage_account_id = azurerm_storage_account.events.id
    queue_name         = azurerm_storage_queue.events.name
  }

  advanced_filter {
    string_contains {
      key    = "subject"
      values = ["/virtualMachineScaleSets/"]
    }
  }

  retry_policy {
    max_delivery_attempts = 30
    event_time_to_live    = 1440
  }

  storage_blob_dead_letter_destination {
    storage_account_id          = azurerm_storage_account.events.id
    storage_blob_container_name = azurerm_storage_container.dead_letter.name
  }
}

resource "azurerm_role_assignment" "queue" {
  count              = local.assign ? 1 : 0
  scope              = azurerm_storage_queue.events.resource_manager_id
  role_definition_id = "${data.azurerm_subscription.current.id}/providers/Microsoft.Authorization/roleDefinitions/${local.storage_queue_data_contributor}"
  principal_id       = var.handler_principal_id
  principal_type     = "ServicePrincipal"
}

resource "azurerm_role_assignment" "poison_queue" {
  count              = local.assign ? 1 : 0
  scope              = azurerm_storage_queue.poison.resource_manager_id
  role_definition_id = "${data.azurerm_subscription.current.id}/providers/Microsoft.Authorization/roleDefinitions/${local.storage_queue_data_contributor}"
  principal_id       = var.handler_principal_id
  principal_type     = "ServicePrincipal"
}

resource "azurerm_role_assignment" "leases" {
  count              = local.assign ? 1 : 0
  scope              = azurerm_storage_container.leases.resource_manager_id
  role_definition_id = "${data.azurerm_subscription.current.id}/providers/Microsoft.Authorization/roleDefinitions/${local.storage_blob_data_contributor}"
  principal_id       = var.handler_principal_id
  principal_type     = "ServicePrincipal"
}

resource "azurerm_role_assignment" "acknowledge" {
  count              = local.assign && var.acknowledge_role_definition_id != "" ? 1 : 0
  scope              = data.azurerm_subscription.current.id
  role_definition_id = "${data.azurerm_subscription.current.id}/providers/Microsoft.Authorization/roleDefinitions/${var.acknowledge_role_definition_id}"
  principal_id       = var.handler_principal_id
  principal_type     = "ServicePrincipal"
}
