"""Dashboard labels, one module per area of the dashboard (merged by hetpool.web.i18n)."""
