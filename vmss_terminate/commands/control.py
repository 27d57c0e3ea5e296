"""CLI commands (control). Placeholder until implemented."""

COMMANDS: list = []
