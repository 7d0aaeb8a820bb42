"""Background workers: scheduler, dispatcher, reconciler.

Each follows load → process (no DB session held) → apply (guarded by the row's state
and attempt), so a restart at any point neither loses a task nor starts it twice.
"""
