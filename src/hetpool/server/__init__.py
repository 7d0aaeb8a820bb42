"""The hetpool server: API, services, database and background workers."""
