"""The Redis LiteLLM itself is configured with, for the state store when ``state.backend`` is
redis and its own URL variable (``state.redis_url_env``, AISIA_REDIS_URL) is unset.

Which wins, first found: the Router's Redis (``router_settings.redis_url``, or
``redis_host``/``redis_port``/``redis_password``: what LiteLLM's router tracks usage and
cooldowns in), then the response cache's (``litellm_settings.cache_params`` with ``type:
redis``), then LiteLLM's environment variables alone. Each is resolved by LiteLLM's own client
logic (``litellm._redis._get_redis_client_logic``), so that the store connects where LiteLLM
does: ``os.environ/NAME`` references and the ``REDIS_*`` variables read through LiteLLM's
secret manager (``get_secret``), a host named in the config outranking ``REDIS_URL``, a Redis
Cluster (``startup_nodes``, ``REDIS_CLUSTER_NODES``: the store then uses redis-py's cluster
client on those nodes) and Sentinel (``sentinel_nodes``, ``REDIS_SENTINEL_NODES``,
``REDIS_SERVICE_NAME``, ``REDIS_SENTINEL_PASSWORD``: the store connects to the master the
sentinels name at start; after a failover, restart the proxy or give the store its own URL).
Cloud IAM credential providers (GCP, Azure AD, ElastiCache IAM) are not URLs: give the store
its own URL then."""

from __future__ import annotations

import os
from typing import Mapping, NamedTuple, Optional
from urllib.parse import quote


class RedisTarget(NamedTuple):
    """Where the store connects: a URL (a cluster's first node when ``cluster``), its origin."""

    url: str
    source: str
    cluster: bool = False


def _server_url(kw: Mapping, host, port) -> str:
    auth = ""
    if kw.get("password"):
        auth = f"{quote(str(kw.get('username') or ''), safe='')}:{quote(str(kw['password']), safe='')}@"
    ssl = kw.get("ssl") is True or str(kw.get("ssl")).lower() == "true"
    db = kw.get("db")
    return (f"{'rediss' if ssl else 'redis'}://{auth}{host}:{port or 6379}"
            + (f"/{db}" if db not in (None, "") else ""))


def _sentinel_master(kw: Mapping) -> Optional[str]:
    """The URL of the master the sentinels name (a network call, at the store's start)."""
    from redis.sentinel import Sentinel

    nodes = [tuple(n) if isinstance(n, (list, tuple)) else (n["host"], int(n["port"])) for n in kw["sentinel_nodes"]]
    extra = {"password": kw["sentinel_password"]} if kw.get("sentinel_password") else {}
    timeout = kw.get("socket_timeout") or 5.0
    host, port = Sentinel(nodes, sentinel_kwargs={**extra, "socket_timeout": timeout},
                          socket_timeout=timeout).discover_master(kw.get("service_name") or "mymaster")
    return _server_url(kw, host, port)


def resolve(settings: Mapping) -> Optional[RedisTarget]:
    """What LiteLLM's client logic makes of `settings` (a RedisCache's keyword arguments, or {}
    for the environment alone), as a target the store can connect to; None when it names no
    Redis (or one the store cannot reach by URL)."""
    from litellm._redis import _get_redis_client_logic

    try:
        kw = _get_redis_client_logic(**{k: v for k, v in settings.items() if v is not None})
    except ValueError:  # "Either 'host' or 'url' must be specified": no Redis here
        return None
    if kw.get("credential_provider") is not None or kw.get("redis_connect_func") is not None:
        return None
    if kw.get("startup_nodes"):
        first = kw["startup_nodes"][0]
        host, port = (first.get("host"), first.get("port")) if isinstance(first, Mapping) else tuple(first)[:2]
        return RedisTarget(_server_url(kw, host, port), "", True)
    if kw.get("sentinel_nodes"):
        return RedisTarget(_sentinel_master(kw), "")
    if kw.get("url"):
        return RedisTarget(str(kw["url"]), "")
    if kw.get("host"):
        return RedisTarget(_server_url(kw, kw["host"], kw.get("port")), "")
    return None


def litellm_redis(router) -> Optional[RedisTarget]:
    """(URL, where it came from, whether a cluster) of the Redis LiteLLM is configured with, or None."""
    cache = getattr(getattr(router, "cache", None), "redis_cache", None)
    kwargs = getattr(cache, "redis_kwargs", None)
    if isinstance(kwargs, Mapping):
        target = resolve(kwargs)
        if target:
            return target._replace(source="router_settings (redis_url or redis_host/redis_port/redis_password)")
    import litellm

    response_cache = getattr(litellm, "cache", None)
    kind = getattr(response_cache, "type", None)
    if getattr(kind, "value", kind) == "redis":
        kwargs = getattr(getattr(response_cache, "cache", None), "redis_kwargs", None)
        target = resolve(kwargs) if isinstance(kwargs, Mapping) else None
        if target:
            return target._replace(source="litellm_settings.cache_params (type: redis)")
    target = resolve({})
    if target:
        named = ("REDIS_CLUSTER_NODES" if target.cluster else "REDIS_URL" if os.environ.get("REDIS_URL")
                 else "REDIS_SENTINEL_NODES" if os.environ.get("REDIS_SENTINEL_NODES") else "REDIS_HOST/REDIS_PORT")
        return target._replace(source=named)
    return None
