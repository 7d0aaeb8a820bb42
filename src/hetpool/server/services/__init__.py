"""Services own transactions; routers and workers call them.

The modules form layers, listed here from the bottom up: a module imports only modules
listed before it. Nothing is imported inside a function to get around a cycle (a cycle
means a module is in the wrong layer). tests/server/test_services_structure.py checks
both rules against this list.

  records      audit, audit_anchor, audit_chain (group commit of the chain), history,
               auth_cache
  context      context (ServiceContext: settings, database, clock, catalog, engines, caches),
               wakeups (between the worker pipelines)
  identity     auth, access, web_sessions, duties
  lifecycle    task_lifecycle (the task state machine: transition, cancel, preempt), reclaim
  inventory    agent_nodes, inventory, users, cost, capacity_whatif, auto_pools,
               nodes (agents, liveness, device health), connector_sync
  placement    task_planning (spec resolution, placement, engine fit), active_work
               (the running tasks, their specs and placements read once per attempt),
               sched_state (running work, learned runtimes), cluster_state (the one per-process
               cache: inventory, idle and live snapshots, admission verdicts), queue_cache
               (the queued tasks, re-read only where they moved), checkpoints (graceful
               stops, resumes, progress; migration rounds)
  governance   quota, approvals, cycle_inputs (what a cycle reads: for the scheduler
               and for plan, which runs the same cycle with the planned task added)
  tasks        deadlines (a task's deadline at risk or not: the API, /metrics, the
               overview), task_views (the task as the API shows it, listing, logs),
               recommend (entry by goal: ranked options, planned with the plan it is
               given; sizes a goal-only submit), tasks (plan and submit), idempotency,
               submit_batch (group commit of submits)
  views        stats, profiles, resources_view, governance_view

Workers (server/workers) and routers sit above all of these; what two workers share lives
in a service (the reconciler completes a preemption through task_lifecycle).
"""
