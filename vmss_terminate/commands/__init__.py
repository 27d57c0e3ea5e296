"""Click commands, one module per area, registered by name in `cli.COMMANDS` (and `emulator.COMMANDS`)
and imported only when they run. Keep them thin: parse, call the library, print."""

__all__: list[str] = []  # a face that exports nothing: use the sub-modules (tests/test_exported_members.py)
