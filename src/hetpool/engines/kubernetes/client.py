"""How hetpool talks to Kubernetes: the official `kubernetes` client (an optional extra,
imported only when a Kubernetes cluster is used), one ApiClient per user built from the
cluster's backend_config, and the API's errors in words. Used by compute and inventory.

Keys: `kubeconfig`, `context`; or `host` with `token` / `token_file`, `ca_file`,
`insecure_skip_tls_verify`; or `in_cluster` (the default inside a pod when nothing else is set).
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

from hetpool.core.errors import BackendUnavailableError

INSTALL_HINT = "pip install 'hetpool[kubernetes]'"


def truthy(value: str | None) -> bool:
    return str(value or "").strip().lower() in ("1", "true", "yes", "on")


def in_pod() -> bool:
    return bool(os.environ.get("KUBERNETES_SERVICE_HOST"))


def where(config: dict[str, str]) -> str:
    """The API server as an error message names it."""
    return config.get("host") or f"kubeconfig {config.get('kubeconfig') or '(default)'} context {config.get('context') or '(current)'}"


def import_client(user: str, error: type[BackendUnavailableError] = BackendUnavailableError) -> SimpleNamespace:
    """The client modules; `user` ("backend", "connector") names who needs them in the error."""
    # Lazy: kubernetes is an optional extra, and a server without it still runs other engines.
    try:
        from kubernetes import client, config
        from kubernetes.client.exceptions import ApiException
        from urllib3.exceptions import HTTPError
    except ImportError as exc:
        raise error(f"the Kubernetes {user} needs the kubernetes client: {INSTALL_HINT} ({exc})") from exc
    return SimpleNamespace(client=client, config=config, ApiException=ApiException, HTTPError=HTTPError)


def api_client(k8s: SimpleNamespace, config: dict[str, str], error: type[BackendUnavailableError] = BackendUnavailableError):
    """An ApiClient of its own (never the process-wide default configuration), failing fast:
    the caller polls or syncs again next pass, so urllib3's retries would only delay the error."""
    cfg = k8s.client.Configuration()
    c = config
    try:
        if c.get("host"):
            cfg.host = c["host"].rstrip("/")
            token = c.get("token") or (Path(c["token_file"]).read_text().strip() if c.get("token_file") else "")
            if token:
                cfg.api_key = {"authorization": f"Bearer {token}"}
            if c.get("ca_file"):
                cfg.ssl_ca_cert = c["ca_file"]
            cfg.verify_ssl = not truthy(c.get("insecure_skip_tls_verify"))
        elif truthy(c.get("in_cluster")) or (not c.get("kubeconfig") and not c.get("context") and in_pod()):
            k8s.config.load_incluster_config(client_configuration=cfg)
        else:
            k8s.config.load_kube_config(
                config_file=c.get("kubeconfig") or None, context=c.get("context") or None, client_configuration=cfg, persist_config=False
            )
    except (k8s.config.ConfigException, OSError, ValueError, KeyError) as exc:
        raise error(f"kubernetes: cannot load the client configuration ({where(c)}): {exc}") from exc
    cfg.retries = 0
    return k8s.client.ApiClient(cfg)


def api_error(exc, forbidden_hint: str) -> str:
    """The API's own Status message, with what to do about 401 / 403 (`forbidden_hint`: the RBAC the caller needs)."""
    try:
        message = json.loads(exc.body or "{}").get("message", "")
    except (ValueError, AttributeError):
        message = str(exc.body or "")[:300]
    text = f"{exc.status} {exc.reason}" + (f": {message}" if message else "")
    if exc.status == 401:
        text += " (the token or kubeconfig credentials were rejected)"
    elif exc.status == 403:
        text += f" ({forbidden_hint})"
    return text
