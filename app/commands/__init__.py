"""The ``askalike`` commands, one module per area; each registers its commands with the Typer apps
of ``app.options`` when imported (``app.cli`` imports them all)."""
