"""Request and response bodies of the HTTP API."""
