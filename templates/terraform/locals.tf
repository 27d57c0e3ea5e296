# Values derived from the variables; kept apart from the resources so tests can evaluate them
# with terraform alone (no provider download).

locals {
  terminate_notification_timeout = "PT${var.terminate_notification_minutes}M"

  default_images = {
    linux   = { publisher = "Canonical", offer = "0001-com-ubuntu-server-jammy", sku = "22_04-lts-gen2", version = "latest" }
    windows = { publisher = "MicrosoftWindowsServer", offer = "WindowsServer", sku = "2022-datacenter-azure-edition", version = "latest" }
  }
  image = coalesce(var.source_image, local.default_images[var.os_type])

  cloud_init = replace(
    replace(file("${path.module}/../cloud-init/vmss-terminate.yaml"), "VMSS_TERMINATE_PIP_ARGS=vmss-terminate", "VMSS_TERMINATE_PIP_ARGS=${var.agent_pip_args}"),
    "VMSS_TERMINATE_AGENT_ARGS=", "VMSS_TERMINATE_AGENT_ARGS=${var.agent_args}"
  )

  # -Command (not -File) so PowerShell parses the quoting: values go in single quotes (' doubled),
  # and " is escaped for the Windows command line.
  windows_install_command = format(
    "powershell.exe -NoProfile -ExecutionPolicy Bypass -Command \"& .\\install-agent.ps1 -PipArgs '%s' -AgentArgs '%s'\"",
    replace(replace(var.agent_pip_args, "'", "''"), "\"", "\\\""),
    replace(replace(var.agent_args, "'", "''"), "\"", "\\\""),
  )
}
