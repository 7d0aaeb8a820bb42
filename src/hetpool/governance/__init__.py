"""Governance rules as pure functions: audit chain, (later) quotas, approvals, cost."""
