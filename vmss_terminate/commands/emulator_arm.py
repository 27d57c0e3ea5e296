import click


@click.command("arm")
def arm_command() -> None:
    """Placeholder."""
