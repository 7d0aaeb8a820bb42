"""A lean HTTP/1.1 keep-alive client for the load benchmarks (api_load, crash_test).

Why not httpx: the load generator runs on the same 2-core machine as the server it
measures, and httpx spends about 1 ms of CPU per request (measured: 1.9 CPU-s for 1,610
submits), which at a few hundred requests per second takes a large share of a core away
from the server. This client writes a request with one `write` and parses the status
line, the headers and a Content-Length (or chunked) body, ~10x cheaper; real clients run
elsewhere, so the figures should not pay for ours. Only what the benchmarks need: one
connection per `Connection`, JSON in and out, no TLS, no redirects, no proxies.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from urllib.parse import urlsplit


class ConnectionFailed(Exception):
    """The server closed or refused the connection (the request may or may not have arrived)."""


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self):
        return json.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class Connection:
    """One keep-alive connection; requests on it go one after the other."""

    def __init__(self, base_url: str, headers: dict[str, str] | None = None, timeout: float = 30.0) -> None:
        parts = urlsplit(base_url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 80
        self.timeout = timeout
        fixed = {"Host": f"{self.host}:{self.port}", "Connection": "keep-alive", **(headers or {})}
        self._fixed = "".join(f"{k}: {v}\r\n" for k, v in fixed.items())
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
            try:
                await self._writer.wait_closed()
            except OSError:
                pass
        self._reader = self._writer = None

    async def request(self, method: str, path: str, body: object = None, headers: dict[str, str] | None = None) -> Reply:
        try:
            return await asyncio.wait_for(self._request(method, path, body, headers), self.timeout)
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ConnectionFailed) as exc:
            await self.close()  # a half-read response would poison the next request
            raise ConnectionFailed(f"{type(exc).__name__}: {exc}") from exc

    async def post(self, path: str, payload: object, headers: dict[str, str] | None = None) -> Reply:
        return await self.request("POST", path, payload, headers)

    async def get(self, path: str, headers: dict[str, str] | None = None) -> Reply:
        return await self.request("GET", path, None, headers)

    async def _request(self, method: str, path: str, body: object, headers: dict[str, str] | None) -> Reply:
        if self._writer is None:
            self._reader, self._writer = await asyncio.open_connection(self.host, self.port)
        data = b"" if body is None else json.dumps(body).encode()
        extra = "".join(f"{k}: {v}\r\n" for k, v in (headers or {}).items())
        kind = "Content-Type: application/json\r\n" if body is not None else ""
        head = f"{method} {path} HTTP/1.1\r\n{self._fixed}{extra}{kind}Content-Length: {len(data)}\r\n\r\n"
        self._writer.write(head.encode("latin-1") + data)
        reader = self._reader
        status_line = await reader.readline()
        if not status_line:
            raise ConnectionFailed("connection closed before a response")
        status = int(status_line.split(b" ", 2)[1])
        got: dict[str, str] = {}
        while True:
            line = await reader.readline()
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            got[name.strip().lower()] = value.strip()
        if "content-length" in got:
            payload = await reader.readexactly(int(got["content-length"]))
        elif got.get("transfer-encoding", "").lower() == "chunked":
            payload = await _chunked(reader)
        else:
            payload = await reader.read()  # until close
        if got.get("connection", "").lower() == "close":
            await self.close()
        return Reply(status, got, payload)


async def _chunked(reader: asyncio.StreamReader) -> bytes:
    out = bytearray()
    while True:
        size = int((await reader.readline()).split(b";")[0].strip(), 16)
        if size == 0:
            await reader.readline()
            return bytes(out)
        out += await reader.readexactly(size)
        await reader.readline()


class Pool:
    """Keep-alive connections per base URL, each used by one request at a time."""

    def __init__(self, headers: dict[str, str] | None = None, timeout: float = 15.0) -> None:
        self.headers = headers or {}
        self.timeout = timeout
        self._idle: dict[str, list[Connection]] = {}
        self._all: list[Connection] = []

    async def post(self, base_url: str, path: str, payload: object, headers: dict[str, str] | None = None) -> Reply:
        idle = self._idle.setdefault(base_url, [])
        conn = idle.pop() if idle else None
        if conn is None:
            conn = Connection(base_url, headers=self.headers, timeout=self.timeout)
            self._all.append(conn)
        try:
            return await conn.post(path, payload, headers)
        finally:
            idle.append(conn)  # a failed one reconnects on its next request

    async def close(self) -> None:
        for conn in self._all:
            await conn.close()
