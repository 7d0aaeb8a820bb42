"""The operations dashboard (docs/dashboard.md): server-rendered pages in English and 简体中文."""
