"""vmss-terminate: graceful scale-in for Azure VM Scale Sets.

Which package serves whom (docs/python-api.md has an example of each, docs/architecture.md the map):

* `vmss_terminate.control` -- for pipelines and autoscale handlers: enable, disable, retime, plan,
  status and upgrade one scale set's terminate notification through ARM (Azure SDK; the
  `[control]` extra).
* `vmss_terminate.fleet` -- for estates: the same control-plane changes across many scale sets and
  subscriptions, found through Azure Resource Graph.
* `vmss_terminate.agent` -- inside each VM: poll Scheduled Events, run drain hooks, approve only
  this VM's own events (requests and the standard library only; never the Azure SDK).
* `vmss_terminate_sim.emulator` and `vmss_terminate_sim.sandbox` -- for tests: local IMDS and ARM
  emulators, and a sandbox that links them the way Azure does so a scale-in can be watched end to end.
* `vmss_terminate.iac` -- for templates: render the ARM / Bicep / Terraform snippets that set the
  same profile at deploy time.

The errors users catch are exported here; each carries the CLI's exit code (`exit_code`):
`VmssTerminateError` (1, the base), `UsageError` (2, bad input, nothing sent) and `AzureError` (1,
Azure or an emulator refused or failed).

The root stays cheap to import (the in-VM agent imports it): nothing here loads a sub-package.
"""

from vmss_terminate.errors import AzureError, UsageError, VmssTerminateError

__version__ = "0.1.0"

__all__ = ["AzureError", "UsageError", "VmssTerminateError", "__version__"]
