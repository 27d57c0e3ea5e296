"""Click commands, one module per area, registered by name in `cli.COMMANDS` (and `emulator.COMMANDS`)
and imported only when they run. Keep them thin: parse, call the library, print."""
