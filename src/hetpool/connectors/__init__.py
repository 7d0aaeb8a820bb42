"""Inventory connectors: read the nodes, devices and states of engines a company already
runs (Slurm, Kubernetes, Ray) into hetpool's terms. Pure readers — the server's sync
service reconciles what they observe into the inventory."""
