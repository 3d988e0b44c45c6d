"""The `shoal` commands, one module per family; each imports only typer at module level (fast --help)."""
