"""Per-token rate limits: a token bucket per caller, 429 with Retry-After when it is empty.

The caller is its bearer token (kept only as a SHA-256 digest, never the token itself) or,
without one, its address. Only /api/ paths count: health, readiness and metrics probes
and the dashboard's static files are never limited. One process keeps its own buckets,
so N replicas behind a load balancer allow up to N times the rate; the limit exists to
stop one runaway script from starving everyone, not to meter exactly.
"""

from __future__ import annotations

import hashlib
import json
import math
import threading
import time

from hetpool.server.services.web_sessions import SCOPE_KEY as WEB_CALLER

MAX_BUCKETS = 50_000  # callers remembered at once; idle full buckets are dropped first


class TokenBuckets:
    def __init__(self, rate_per_s: float, burst: int, clock=time.monotonic) -> None:
        self.rate = rate_per_s
        self.burst = max(1, burst)
        self.clock = clock
        self._lock = threading.Lock()
        self._buckets: dict[str, tuple[float, float]] = {}  # key → (tokens, last refill time)

    def take(self, key: str) -> float:
        """0.0 when the request may go; else the seconds until one token is back."""
        now = self.clock()
        with self._lock:
            tokens, last = self._buckets.get(key, (float(self.burst), now))
            tokens = min(float(self.burst), tokens + (now - last) * self.rate)
            if tokens >= 1.0:
                self._buckets[key] = (tokens - 1.0, now)
                wait = 0.0
            else:
                self._buckets[key] = (tokens, now)
                wait = (1.0 - tokens) / self.rate
            if len(self._buckets) > MAX_BUCKETS:
                self._forget(now)
            return wait

    def _forget(self, now: float) -> None:
        full_after = self.burst / self.rate  # a bucket idle this long is full again: forgetting it changes nothing
        self._buckets = {k: v for k, v in self._buckets.items() if now - v[1] < full_after}


def caller_key(scope) -> str:
    web = scope.get(WEB_CALLER)
    if web is not None:  # a dashboard page's in-process call: one bucket per session, as per token
        return f"s:{web.session_id}"
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            return "t:" + hashlib.sha256(value).hexdigest()[:32]
    client = scope.get("client")
    return "a:" + (client[0] if client else "")


class RateLimitMiddleware:
    """ASGI middleware; `rate_per_s` <= 0 switches it off."""

    def __init__(self, app, rate_per_s: float, burst: int) -> None:
        self.app = app
        self.buckets = TokenBuckets(rate_per_s, burst) if rate_per_s > 0 else None

    async def __call__(self, scope, receive, send) -> None:
        if self.buckets is None or scope["type"] != "http" or not scope.get("path", "").startswith("/api/"):
            return await self.app(scope, receive, send)
        wait = self.buckets.take(caller_key(scope))
        if wait <= 0:
            return await self.app(scope, receive, send)
        retry = max(1, math.ceil(wait))
        body = json.dumps(
            {
                "code": "rate_limited",
                "message": f"too many requests for this token: at most {self.buckets.rate:g}/s (bursts of {self.buckets.burst}); retry in {retry}s",
            }
        ).encode()
        headers = [(b"content-type", b"application/json"), (b"retry-after", str(retry).encode()), (b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": 429, "headers": headers})
        await send({"type": "http.response.body", "body": body})
