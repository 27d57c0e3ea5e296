output "queue_url" {
  description = "The --queue-url for `vmss-terminate central run --source queue`."
  value       = "${azurerm_storage_account.events.primary_queue_endpoint}${azurerm_storage_queue.events.name}"
}

output "poison_queue_name" {
  value = azurerm_storage_queue.poison.name
}
