"""A Kubernetes cluster's backend_config, checked: names, gang mode, and the isolation settings
(namespace per tenant, the pods' uid/gid, refused keys). See manifests.py for what is built
from it and docs/backends.md#the-kubernetes-backend for each key."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import re
from dataclasses import dataclass, field

GANG_MODES = ("indexed-job", "jobset", "volcano", "kueue")
# Gang modes whose workers share one pod template (an Indexed Job, queued by Kueue or not).
SHARED_TEMPLATE_MODES = ("indexed-job", "kueue")
NAMESPACE_MODES = ("tenant", "single")
DEFAULT_NAMESPACE = "hetpool"
DEFAULT_NAMESPACE_PREFIX = "hetpool-"
DEFAULT_RUN_AS = 1000
# backend_config keys that would weaken the pod's isolation: hetpool offers no way to, and says so.
FORBIDDEN_KEYS = {
    "host_paths": "hetpool mounts no volumes, least of all host paths",
    "host_path": "hetpool mounts no volumes, least of all host paths",
    "volumes": "hetpool mounts no volumes, least of all host paths",
    "host_network": "pods never share the node's network namespace",
    "host_pid": "pods never share the node's process namespace",
    "host_ipc": "pods never share the node's IPC namespace",
    "privileged": "pods never run privileged",
    "allow_privilege_escalation": "pods never gain privileges (allowPrivilegeEscalation is always false)",
    "capabilities": "pods drop every capability",
    "run_as_non_root": "pods always run as non-root",
    "automount_service_account_token": "pods never get a service-account token",
}
DEFAULT_NODE_LABEL = "kubernetes.io/hostname"
_DNS_LABEL = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")
_TOLERATION_KEYS = {"key", "operator", "value", "effect", "tolerationSeconds"}


class ManifestError(ValueError):
    """The request or the backend_config cannot be expressed as Kubernetes objects."""


class ConfigError(ManifestError):
    """A backend_config key is unusable or refused; `field` names it (apply answers 422)."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"kubernetes backend_config: {field_name} {message}")
        self.field = field_name
        self.reason = f"{field_name} {message}"


def is_k8s_name(name: str) -> bool:
    return len(name) <= 63 and bool(_DNS_LABEL.match(name))


# ----------------------------------------------------------------------------- config


@dataclass(frozen=True)
class ManifestConfig:
    """The manifest-shaping keys of a Cluster's backend_config (connection keys: backend.py)."""

    namespace: str = DEFAULT_NAMESPACE  # namespace_mode single; in tenant mode, the request's (for_tenant)
    namespace_mode: str = "tenant"
    namespace_prefix: str = DEFAULT_NAMESPACE_PREFIX
    tenant_namespaces: dict[str, str] = field(default_factory=dict)  # tenant path prefix -> namespace
    run_as_user: int = DEFAULT_RUN_AS
    run_as_group: int = DEFAULT_RUN_AS
    gang_mode: str = "indexed-job"
    image_default: str = ""
    priority_class: str = ""
    service_account: str = ""
    node_selector_label: str = DEFAULT_NODE_LABEL
    tolerations: list[dict] = field(default_factory=list)
    resource_models: dict[str, str] = field(default_factory=dict)  # model -> extended resource
    kueue_queue: str = ""
    volcano_queue: str = "default"
    ttl_after_finished_s: int | None = 7 * 24 * 3600

    @classmethod
    def from_config(cls, config: dict[str, str]) -> ManifestConfig:
        c = {k: str(v).strip() for k, v in (config or {}).items()}
        for key, why in FORBIDDEN_KEYS.items():
            if key in c:
                raise ConfigError(key, f"is refused: {why}")
        mode = c.get("gang_mode") or "indexed-job"
        if mode not in GANG_MODES:
            raise ConfigError("gang_mode", f"{mode!r} is not one of {', '.join(GANG_MODES)}")
        namespace = c.get("namespace") or DEFAULT_NAMESPACE
        if not is_k8s_name(namespace):
            raise ConfigError("namespace", f"{namespace!r} is not a DNS label")
        # A `namespace` alone keeps its old meaning (every tenant in it); otherwise one per tenant.
        namespace_mode = c.get("namespace_mode") or ("single" if c.get("namespace") else "tenant")
        if namespace_mode not in NAMESPACE_MODES:
            raise ConfigError("namespace_mode", f"{namespace_mode!r} is not one of {', '.join(NAMESPACE_MODES)}")
        prefix = c.get("namespace_prefix", DEFAULT_NAMESPACE_PREFIX)
        if not re.fullmatch(r"[a-z]([-a-z0-9]{0,20})", prefix):
            raise ConfigError("namespace_prefix", f"{prefix!r} must be a lower-case DNS label start of at most 21 characters (e.g. 'hetpool-')")
        user, group = _ids(c)
        if mode == "kueue" and not c.get("kueue_queue"):
            raise ConfigError("kueue_queue", "is needed by gang_mode kueue (the LocalQueue's name)")
        ttl_text = c.get("ttl_after_finished_s", "604800")
        try:
            ttl = int(ttl_text) if ttl_text else None
        except ValueError:
            raise ConfigError("ttl_after_finished_s", f"{ttl_text!r} is not a whole number") from None
        return cls(
            namespace=namespace,
            namespace_mode=namespace_mode,
            namespace_prefix=prefix,
            tenant_namespaces=parse_tenant_namespaces(c.get("tenant_namespaces", "")),
            run_as_user=user,
            run_as_group=group,
            gang_mode=mode,
            image_default=c.get("image_default", ""),
            priority_class=c.get("priority_class", ""),
            service_account=c.get("service_account", ""),
            node_selector_label=c.get("node_selector_label") or DEFAULT_NODE_LABEL,
            tolerations=parse_tolerations(c.get("tolerations", "")),
            resource_models=model_resources(c.get("resource_models", "")),
            kueue_queue=c.get("kueue_queue", ""),
            volcano_queue=c.get("volcano_queue") or "default",
            ttl_after_finished_s=ttl if ttl is None or ttl >= 0 else None,
        )

    def for_tenant(self, tenant: str) -> ManifestConfig:
        """This config with the namespace the tenant's workloads go to."""
        if self.namespace_mode == "single":
            return self
        return dataclasses.replace(self, namespace=tenant_namespace(tenant, self.namespace_prefix, self.tenant_namespaces))


def _ids(c: dict[str, str]) -> tuple[int, int]:
    """run_as_user / run_as_group: whole numbers > 0 (never root)."""
    out = []
    for key, default in (("run_as_user", str(DEFAULT_RUN_AS)), ("run_as_group", c.get("run_as_user") or str(DEFAULT_RUN_AS))):
        text = c.get(key) or default
        if not re.fullmatch(r"[0-9]{1,10}", text) or not 0 < int(text) < 2**31:  # not isdigit(): "²" is a digit to it
            why = "is refused: pods never run as root (uid/gid 0)" if text.strip("0") == "" and text else "must be a uid/gid between 1 and 2147483647"
            raise ConfigError(key, f"{text!r} {why}")
        out.append(int(text))
    return out[0], out[1]


def parse_tenant_namespaces(text: str) -> dict[str, str]:
    """ "ai-lab=ml-team, infra/data=etl" -> {tenant prefix: namespace} (longest prefix wins)."""
    out: dict[str, str] = {}
    for item in filter(None, (p.strip() for p in (text or "").split(","))):
        prefix, sep, namespace = (x.strip() for x in item.partition("="))
        if not sep or not re.fullmatch(r"[a-z0-9][a-z0-9_-]*(/[a-z0-9][a-z0-9_-]*)*", prefix) or not is_k8s_name(namespace):
            raise ConfigError("tenant_namespaces", f"entry {item!r} is not 'tenant-prefix=namespace' (a tenant path and a DNS label)")
        out[prefix] = namespace
    return out


def tenant_namespace(tenant: str, prefix: str = DEFAULT_NAMESPACE_PREFIX, explicit: dict[str, str] | None = None) -> str:
    """The namespace of `tenant`'s workloads: the longest prefix in `explicit`, else derived.

    Derived: prefix + the path with "/" as "--" ("ai-lab/nlp" -> "hetpool-ai-lab--nlp"), which
    is readable and one-to-one as long as no segment holds "--" or "_" and it fits in 63
    characters. Otherwise a readable part, "---" (which the readable form never contains) and
    a hash of the path: two tenants never share a namespace by accident."""
    best = max((p for p in (explicit or {}) if tenant == p or tenant.startswith(p + "/")), key=len, default="")
    if best:
        return (explicit or {})[best]
    segments = tenant.split("/")
    plain = prefix + "--".join(segments)
    if all("--" not in s and "_" not in s for s in segments) and is_k8s_name(plain):
        return plain
    digest = hashlib.sha256(tenant.encode()).hexdigest()[:10]
    readable = re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]+", "-", tenant.lower())).strip("-")
    return f"{prefix}{readable[: 63 - len(prefix) - 13].rstrip('-')}---{digest}"


def config_problems(config: dict[str, str]) -> list[dict[str, str]]:
    """{"loc", "msg"} for an unusable Kubernetes backend_config (apply answers 422)."""
    try:
        ManifestConfig.from_config(config)
    except ConfigError as exc:
        return [{"loc": f"backend_config.{exc.field}", "msg": exc.reason}]
    except ManifestError as exc:
        return [{"loc": "backend_config", "msg": str(exc)}]
    return []


def parse_tolerations(text: str) -> list[dict]:
    if not text:
        return []
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:  # RecursionError: "[[[[…" nested past the parser's depth
        raise ConfigError("tolerations", f"is not JSON: {exc}") from exc
    if not isinstance(data, list) or not all(isinstance(t, dict) and set(t) <= _TOLERATION_KEYS for t in data):
        raise ConfigError("tolerations", f"must be a JSON list of objects with keys {sorted(_TOLERATION_KEYS)}")
    return data


def model_resources(text: str) -> dict[str, str]:
    """`resource_models`, in the inventory connector's syntax ("nvidia.com/gpu=nvidia-a100-80g,…"
    or a JSON object), read the other way round: model → the extended resource to request.
    Product keys (no "/") only matter to the connector. The syntax is the connector's
    (`parse_overrides`), repeated here because backends may not import connectors."""
    text = (text or "").strip()
    pairs: dict[str, str] = {}
    if text.startswith("{"):
        try:
            pairs = {str(k).strip(): str(v).strip() for k, v in json.loads(text).items()}
        except (ValueError, AttributeError, RecursionError) as exc:
            raise ConfigError("resource_models", f"is not a JSON object: {exc}") from exc
    else:
        for item in filter(None, (p.strip() for p in text.split(","))):
            key, sep, model = item.partition("=")
            if not sep or not key.strip() or not model.strip():
                raise ConfigError("resource_models", f"entry {item!r} is not key=model")
            pairs[key.strip()] = model.strip()
    return {model: resource for resource, model in pairs.items() if "/" in resource}
