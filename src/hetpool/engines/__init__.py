"""The engines hetpool runs work on — local processes, Slurm, Ray, Kubernetes — one package each.

Every engine package holds `client` (how to talk to the engine), `config` (its
backend_config keys), `compute` (the execution backend under `base.Backend`) and, where the
engine reports its own nodes, `inventory` (the connector under `base.InventoryConnector`).
`registry.ENGINES` maps a cluster's `backend` kind to the engine's descriptor.
"""
