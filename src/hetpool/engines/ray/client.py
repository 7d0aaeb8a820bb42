"""How hetpool talks to Ray: the dashboard's HTTP APIs (Jobs REST API, state API, cluster
status) over httpx, with no `ray` package on the server. Compute and inventory each turn
the answers into their own errors (a job call and an inventory read fail differently)."""

from __future__ import annotations

import httpx

from hetpool.engines.ray.config import auth_headers, dashboard_address, number

# The state API's own upper limit (RAY_MAX_LIMIT_FROM_API_SERVER): every node in one page.
NODES_PATH = "/api/v0/nodes?detail=1&limit=10000"


class RayDashboard:
    """Where the dashboard is and how to authenticate; `open()` gives a client for one pass."""

    def __init__(self, config: dict[str, str], transport: httpx.BaseTransport | None = None) -> None:
        self.address = dashboard_address(config)
        self.timeout_s = number(config, "timeout_s", 10.0)
        self.headers = auth_headers(config)
        self.transport = transport  # tests: httpx.MockTransport

    def open(self) -> httpx.Client:
        return httpx.Client(timeout=self.timeout_s, headers=self.headers, follow_redirects=True, transport=self.transport)
