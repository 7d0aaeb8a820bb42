"""The operations dashboard (a placeholder home page for now), in English and 简体中文."""
