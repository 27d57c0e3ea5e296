variable "name" {
  description = "Scale set name; instances are named {name}_{instanceId}."
  type        = string
}

variable "resource_group_name" {
  type = string
}

variable "location" {
  type = string
}

variable "os_type" {
  description = "linux (cloud-init installs the agent) or windows (Custom Script Extension runs templates/windows/install-agent.ps1)."
  type        = string
  default     = "linux"
  validation {
    condition     = contains(["linux", "windows"], var.os_type)
    error_message = "os_type must be linux or windows."
  }
}

variable "sku" {
  type    = string
  default = "Standard_B2s"
}

variable "instances" {
  type    = number
  default = 2
}

variable "subnet_id" {
  description = "Resource id of an existing subnet."
  type        = string
}

variable "admin_username" {
  type    = string
  default = "azureuser"
}

variable "admin_ssh_public_key" {
  description = "Linux: SSH public key for admin_username (password login is disabled)."
  type        = string
  default     = null
}

variable "admin_password" {
  description = "Windows: administrator password."
  type        = string
  default     = null
  sensitive   = true
}

variable "source_image" {
  description = "Marketplace image; the default depends on os_type (Ubuntu 22.04 or Windows Server 2022)."
  type = object({
    publisher = string
    offer     = string
    sku       = string
    version   = string
  })
  default = null
}

variable "upgrade_mode" {
  description = "With Manual, run `vmss-terminate upgrade` after changing the timeout: existing instances keep the old one until upgraded."
  type        = string
  default     = "Manual"
  validation {
    condition     = contains(["Manual", "Automatic"], var.upgrade_mode)
    error_message = "upgrade_mode must be Manual or Automatic (Rolling needs a health probe this module does not create)."
  }
}

variable "terminate_notification_enabled" {
  type    = bool
  default = true
}

variable "terminate_notification_minutes" {
  description = "Minutes Azure waits for the instance to approve its Terminate event before deleting it (PT5M..PT15M)."
  type        = number
  default     = 10
  validation {
    condition     = var.terminate_notification_minutes >= 5 && var.terminate_notification_minutes <= 15 && floor(var.terminate_notification_minutes) == var.terminate_notification_minutes
    error_message = "terminate_notification_minutes must be a whole number of minutes from 5 to 15 (Azure accepts PT5M..PT15M)."
  }
}

variable "install_agent" {
  description = "Install the vmss-terminate agent on every instance."
  type        = bool
  default     = true
}

variable "agent_pip_args" {
  description = "pip arguments that install the agent: a version pin, a wheel URL you host, or --index-url/--find-links for instances without internet access."
  type        = string
  default     = "vmss-terminate"
}

variable "agent_args" {
  description = "Extra `vmss-terminate agent run` arguments, e.g. --hook /etc/vmss-terminate/hooks/drain."
  type        = string
  default     = ""
}

variable "windows_install_script_uri" {
  description = "Windows: URL the Custom Script Extension downloads templates/windows/install-agent.ps1 from (e.g. a blob you host)."
  type        = string
  default     = null
}

variable "tags" {
  type    = map(string)
  default = {}
}
