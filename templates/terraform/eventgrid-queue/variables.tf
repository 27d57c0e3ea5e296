variable "resource_group_name" {
  description = "Resource group (of the subscription whose scale sets' scheduled events are delivered) for the storage account and the system topic."
  type        = string
}

variable "location" {
  description = "Region of the storage account (the system topic of a subscription is global)."
  type        = string
}

variable "storage_account_name" {
  description = "Storage account for the queue, its poison queue, the lease blobs and dead letters: 3-24 lower-case letters and digits."
  type        = string
  validation {
    condition     = can(regex("^[a-z0-9]{3,24}$", var.storage_account_name))
    error_message = "storage_account_name: 3-24 lower-case letters and digits."
  }
}

variable "queue_name" {
  description = "Queue Event Grid delivers scheduled events to (its poison queue is QUEUE-poison)."
  type        = string
  default     = "scheduled-events"
}

variable "system_topic_name" {
  description = "Name of the Event Grid system topic of this subscription."
  type        = string
  default     = "scheduled-events"
}

variable "handler_principal_id" {
  description = "Object id of the handler identity (managed identity or service principal); empty: no role assignments."
  type        = string
  default     = ""
}

variable "acknowledge_role_definition_id" {
  description = "Id (GUID) of the role that may acknowledge scheduled events, assigned at the subscription; default the built-in role Scheduled Events Contributor, id b67fe603-310e-4889-b9ee-8257d09d353d, whose one write action is Microsoft.Maintenance/scheduledevents/acknowledge/action (its role definition as published at azure-rbac-catalog.org/roles/b67fe603-310e-4889-b9ee-8257d09d353d; Learn calls it ScheduledEventContributor); empty: not assigned."
  type        = string
  default     = "b67fe603-310e-4889-b9ee-8257d09d353d"
}
