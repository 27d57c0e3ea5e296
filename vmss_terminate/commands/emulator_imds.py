import click


@click.command("imds")
def imds_command() -> None:
    """Placeholder."""
