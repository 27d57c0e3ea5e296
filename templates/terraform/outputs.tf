output "scale_set_id" {
  value = one(concat(azurerm_linux_virtual_machine_scale_set.this[*].id, azurerm_windows_virtual_machine_scale_set.this[*].id))
}

output "terminate_notification_timeout" {
  description = "The notBeforeTimeout the scale set model carries, e.g. PT10M."
  value       = local.terminate_notification_timeout
}
