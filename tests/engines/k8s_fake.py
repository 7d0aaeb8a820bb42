"""A recorded-protocol fake of the Kubernetes API server, for the connector tests.

THIS IS NOT A KUBERNETES API SERVER. No kube-apiserver can run on this project's CI
machines (not packaged for Debian, PyPI or npm; kind / k3s need Docker), so the connector's
HTTP side is tested against this stand-in: a stdlib threaded HTTP server that replays
NodeList / PodList objects in the real API shape (tests/engines/fixtures/k8s/) and
implements just the protocol the connector relies on, as the API documents it:

- `GET /version` and `/version/` (a version.Info object);
- `GET /api/v1/nodes` and `GET /api/v1/pods` with `limit` / `continue` pagination
  (`metadata.continue`, `remainingItemCount`; an expired token is a 410 Status), equality
  `labelSelector` terms (`k`, `!k`, `k=v`, `k==v`, `k!=v`), and `fieldSelector` terms on
  `spec.nodeName`, `status.phase`, `metadata.name`, `metadata.namespace` (`=`, `==`, `!=`);
  anything else in a selector is a 400 Status, as on a real server;
- bearer-token authentication (401 Status without the right `Authorization` header) and
  per-path 403s to play RBAC.

Every request is recorded (method, path, query, headers) so tests can assert what the
official client actually sent.
"""

from __future__ import annotations

import base64
import json
import re
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

VERSION = {
    "major": "1",
    "minor": "33",
    "gitVersion": "v1.33.4",
    "gitCommit": "74cdb426e9b67b0a7f1a5ac7b8c1e0b2a4f8d1e3",
    "gitTreeState": "clean",
    "buildDate": "2026-08-13T11:32:03Z",
    "goVersion": "go1.24.5",
    "compiler": "gc",
    "platform": "linux/amd64",
}
_LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_FIELDS = {"spec.nodeName", "status.phase", "metadata.name", "metadata.namespace"}


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    headers: dict[str, str]  # lower-case names


class BadRequest(Exception):
    pass


def _status(code: int, reason: str, message: str) -> dict:
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason, "code": code}


def label_matcher(selector: str):
    """Equality-based label selector → predicate on a labels dict (set-based terms are refused)."""
    terms = []
    for raw in filter(None, (t.strip() for t in selector.split(","))):
        match = re.fullmatch(r"(!?)([^=!\s]+)\s*(?:(==|=|!=)\s*([^=!,\s]*))?", raw)
        if not match or (match.group(1) and match.group(3)) or not _LABEL_KEY.match(match.group(2)):
            raise BadRequest(f"unable to parse requirement: found '{raw}', expected: key, !key, key=value or key!=value")
        terms.append((bool(match.group(1)), match.group(2), match.group(3), match.group(4) or ""))

    def matches(labels: dict[str, str]) -> bool:
        for negated, key, op, value in terms:
            if op is None and (key in labels) == negated:
                return False
            if op in ("=", "==") and labels.get(key) != value:
                return False
            if op == "!=" and labels.get(key) == value:
                return False
        return True

    return matches


def field_matcher(selector: str):
    """Field selector on the fields the real API indexes for pods and nodes."""
    terms = []
    for raw in filter(None, (t.strip() for t in selector.split(","))):
        match = re.fullmatch(r"([A-Za-z.]+)(==|=|!=)(.*)", raw)
        if not match:
            raise BadRequest(f"invalid selector: '{raw}'; can't understand '{raw}'")
        if match.group(1) not in _FIELDS:
            raise BadRequest(f"field label not supported: {match.group(1)}")
        terms.append(match.groups())

    def value(obj: dict, path: str) -> str:
        section, name = path.split(".")
        return str((obj.get(section) or {}).get(name) or "")

    return lambda obj: all((value(obj, f) == v) == (op != "!=") for f, op, v in terms)


class FakeKubeAPI:
    """Serves `nodes` and `pods` (API-shaped dicts) on 127.0.0.1:<free port> in a thread."""

    def __init__(self, nodes: list[dict], pods: list[dict] = (), *, token: str | None = "test-token", forbidden: tuple[str, ...] = ()) -> None:
        self.nodes, self.pods, self.token, self.forbidden = list(nodes), list(pods), token, set(forbidden)
        self.requests: list[Recorded] = []
        self.expire_next_continue = False  # the next request carrying a continue token gets a 410
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        # A short poll interval: shutdown() waits for it, and every HTTP test stops a server.
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02}, name="fake-kube-api", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def __enter__(self) -> FakeKubeAPI:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def paths(self) -> list[str]:
        return [r.path for r in self.requests]

    # -- request handling ----------------------------------------------------------------

    def _respond(self, method: str, path: str, query: dict[str, str], headers: dict[str, str]) -> tuple[int, dict]:
        self.requests.append(Recorded(method, path, query, headers))
        if self.token is not None and headers.get("authorization") != f"Bearer {self.token}":
            return 401, _status(401, "Unauthorized", "Unauthorized")
        if path in self.forbidden:
            resource = path.rsplit("/", 1)[-1]
            user = "system:serviceaccount:hetpool:connector"
            message = f'{resource} is forbidden: User "{user}" cannot list resource "{resource}" in API group "" at the cluster scope'
            return 403, _status(403, "Forbidden", message)
        if method != "GET":
            return 405, _status(405, "MethodNotAllowed", f"the server does not allow this method on the requested resource: {method}")
        if path in ("/version", "/version/"):  # the client asks for /version/; the API server answers both
            return 200, VERSION
        kinds = {"/api/v1/nodes": ("NodeList", self.nodes), "/api/v1/pods": ("PodList", self.pods)}
        if path not in kinds:
            return 404, _status(404, "NotFound", "the server could not find the requested resource")
        kind, objects = kinds[path]
        try:
            return 200, self._list(kind, objects, query)
        except BadRequest as exc:
            return 400, _status(400, "BadRequest", str(exc))
        except _Expired:
            message = "The provided continue parameter is too old to display a consistent list result. "
            message += "You can start a new list without the continue parameter."
            return 410, _status(410, "Expired", message)

    def _list(self, kind: str, objects: list[dict], query: dict[str, str]) -> dict:
        labels = label_matcher(query.get("labelSelector", ""))
        fields = field_matcher(query.get("fieldSelector", ""))
        selected = [o for o in objects if labels((o.get("metadata") or {}).get("labels") or {}) and fields(o)]
        # The token binds the query it continues, as the real server's does (it refuses a mismatch).
        fingerprint = f"{query.get('labelSelector', '')}|{query.get('fieldSelector', '')}"
        start = 0
        if query.get("continue"):
            if self.expire_next_continue:
                self.expire_next_continue = False
                raise _Expired()
            try:
                token = json.loads(base64.urlsafe_b64decode(query["continue"]))
                start = int(token["offset"])
            except (ValueError, KeyError, TypeError) as exc:
                raise BadRequest(f"continue key is not valid: {exc}") from exc
            if token.get("query") != fingerprint:
                raise BadRequest("continue key is not valid: it was issued for a different query")
        limit = int(query["limit"]) if query.get("limit", "").isdigit() and int(query["limit"]) > 0 else len(selected)
        page = selected[start : start + limit]
        meta: dict = {"resourceVersion": "918273"}
        if start + limit < len(selected):
            meta["continue"] = base64.urlsafe_b64encode(json.dumps({"offset": start + limit, "query": fingerprint}).encode()).decode()
            meta["remainingItemCount"] = len(selected) - start - limit
        return {"kind": kind, "apiVersion": "v1", "metadata": meta, "items": page}

    def _handler(self):
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def _serve(self) -> None:
                url = urlsplit(self.path)
                query = {k: v[-1] for k, v in parse_qs(url.query, keep_blank_values=True).items()}
                headers = {k.lower(): v for k, v in self.headers.items()}
                code, body = fake._respond(self.command, url.path, query, headers)
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _serve

            def log_message(self, format: str, *args) -> None:  # keep pytest output clean
                pass

        return Handler


class _Expired(Exception):
    pass
