"""The scheduling core: pure functions over a snapshot. Imports no web, DB or backend code."""
