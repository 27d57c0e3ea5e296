"""The simulation that ships beside vmss-terminate: emulators of IMDS, ARM (with Resource Graph) and
the Kubernetes API, the sandbox that wires them to real agents and the control plane, and the demo.

Nothing in `vmss_terminate` imports this package (tests/test_layers.py); the CLI registers
`emulator`, `sandbox` and `demo` by module name (`vmss_terminate/cli.py`), so they load only when run.
"""

__all__: list[str] = []  # a face that exports nothing: use the sub-modules (tests/test_exported_members.py)
