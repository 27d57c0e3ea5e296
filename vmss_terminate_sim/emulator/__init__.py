"""Local emulators of the Azure endpoints this product talks to, on the standard library's
`http.server`, faithful enough that the agent, the Azure SDK and the az CLI run against them
unchanged. Users import them to test drain hooks and pipelines without a subscription; the test
suite and the sandbox are built on them.

What is where:

* `emulator.imds` -- Instance Metadata Service: Scheduled Events and instance metadata, one server
  per VM over a shared `PlacementGroup` (`start_imds`, `ImdsServers`, `ImdsEmulator`, `EmulatedEvent`,
  `Approval`). Stdlib only.
* `emulator.arm` -- Azure Resource Manager for scale sets plus a managed-identity token endpoint
  (`start_arm`, `ArmServers`, `ArmState`, `ArmEmulator`, `TokenEndpoint`).
* `emulator.server` -- the shared HTTP machinery: `EmulatorServer` runs any app (`handle(Request) ->
  Response`) on a background thread, with a request log and fault injection.
* `emulator.routes` -- the one dispatch style: an explicit route table (`Route`, `match_route`).
* `emulator.faults` -- injected failures (a status, a delay, a non-JSON body), from Python,
  `--fault SPEC` or `/emulator/faults`.

This package face imports nothing, so `import vmss_terminate_sim.emulator.imds` never loads the ARM side.
"""

__all__: list[str] = []  # a face that exports nothing: use the sub-modules (tests/test_exported_members.py)
