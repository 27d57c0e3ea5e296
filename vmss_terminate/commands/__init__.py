"""Click commands, one module per area. Each module exposes COMMANDS, the commands it adds to
the root group. Keep them thin: parse, call the library, print."""
