"""CLI commands (agent). Placeholder until implemented."""

COMMANDS: list = []
