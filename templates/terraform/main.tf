# A Linux or Windows VM scale set with terminate notifications and the vmss-terminate agent.
# The termination_notification block is what `vmss-terminate render --format terraform` prints;
# its timeout and the cloud-init custom data come from locals.tf.

resource "azurerm_linux_virtual_machine_scale_set" "this" {
  count               = var.os_type == "linux" ? 1 : 0
  name                = var.name
  resource_group_name = var.resource_group_name
  location            = var.location
  sku                 = var.sku
  instances           = var.instances
  admin_username      = var.admin_username
  upgrade_mode        = var.upgrade_mode
  overprovision       = false
  custom_data         = var.install_agent ? base64encode(local.cloud_init) : null
  tags                = var.tags

  disable_password_authentication = true

  lifecycle {
    precondition {
      condition     = var.admin_ssh_public_key != null
      error_message = "os_type linux needs admin_ssh_public_key."
    }
  }

  admin_ssh_key {
    username   = var.admin_username
    public_key = var.admin_ssh_public_key
  }

  termination_notification {
    enabled = var.terminate_notification_enabled
    timeout = local.terminate_notification_timeout
  }

  source_image_reference {
    publisher = local.image.publisher
    offer     = local.image.offer
    sku       = local.image.sku
    version   = local.image.version
  }

  os_disk {
    caching              = "ReadWrite"
    storage_account_type = "StandardSSD_LRS"
  }

  network_interface {
    name    = "${var.name}-nic"
    primary = true

    ip_configuration {
      name      = "ipconfig1"
      primary   = true
      subnet_id = var.subnet_id
    }
  }
}

resource "azurerm_windows_virtual_machine_scale_set" "this" {
  count                = var.os_type == "windows" ? 1 : 0
  name                 = var.name
  computer_name_prefix = substr(var.name, 0, 9)
  resource_group_name  = var.resource_group_name
  location             = var.location
  sku                  = var.sku
  instances            = var.instances
  admin_username       = var.admin_username
  admin_password       = var.admin_password
  upgrade_mode         = var.upgrade_mode
  overprovision        = false
  tags                 = var.tags

  termination_notification {
    enabled = var.terminate_notification_enabled
    timeout = local.terminate_notification_timeout
  }

  source_image_reference {
    publisher = local.image.publisher
    offer     = local.image.offer
    sku       = local.image.sku
    version   = local.image.version
  }

  os_disk {
    caching              = "ReadWrite"
    storage_account_type = "StandardSSD_LRS"
  }

  network_interface {
    name    = "${var.name}-nic"
    primary = true

    ip_configuration {
      name      = "ipconfig1"
      primary   = true
      subnet_id = var.subnet_id
    }
  }

  lifecycle {
    precondition {
      condition     = var.admin_password != null
      error_message = "os_type windows needs admin_password."
    }
    precondition {
      condition     = !var.install_agent || var.windows_install_script_uri != null
      error_message = "install_agent on Windows needs windows_install_script_uri (where install-agent.ps1 is hosted)."
    }
  }

  dynamic "extension" {
    for_each = var.install_agent ? [1] : []
    content {
      name                       = "vmss-terminate-agent"
      publisher                  = "Microsoft.Compute"
      type                       = "CustomScriptExtension"
      type_handler_version       = "1.10"
      auto_upgrade_minor_version = true
      settings                   = jsonencode({})
      # The script URI may carry a SAS token: protected settings only.
      protected_settings = jsonencode({
        fileUris         = [var.windows_install_script_uri]
        commandToExecute = local.windows_install_command
      })
    }
  }
}
