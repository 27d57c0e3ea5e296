"""The simulation's CLI commands (`emulator`, `sandbox`, `demo`), registered lazily by `vmss_terminate/cli.py`."""

__all__: list[str] = []  # a face that exports nothing: use the sub-modules (tests/test_exported_members.py)
