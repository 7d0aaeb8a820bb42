"""Execution backends: where admitted work actually runs (local hosts, Slurm, Kubernetes, Ray)."""
