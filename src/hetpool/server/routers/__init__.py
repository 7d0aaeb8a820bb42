"""Thin HTTP routes: parse, call a service inside a transaction, shape the response."""
