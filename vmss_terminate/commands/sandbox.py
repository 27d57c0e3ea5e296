"""CLI commands (sandbox). Placeholder until implemented."""

COMMANDS: list = []
