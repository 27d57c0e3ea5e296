"""CLI commands (iac). Placeholder until implemented."""

COMMANDS: list = []
