"""The `hetpool` command line (Typer + Rich), built on the HTTP client."""
