"""Trace-driven simulation through the real scheduling core (the same `run_cycle`)."""
