"""The simulation's CLI commands (`emulator`, `sandbox`, `demo`), registered lazily by `vmss_terminate/cli.py`."""
