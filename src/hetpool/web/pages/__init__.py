"""Dashboard pages, one module per area, each exporting `router`."""
