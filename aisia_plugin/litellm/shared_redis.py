"""The Redis LiteLLM itself is configured with, for the state store when ``state.backend`` is
redis and its own URL variable (``state.redis_url_env``, AISIA_REDIS_URL) is unset.

Which wins, first found: the Router's Redis (``router_settings.redis_url``, or
``redis_host``/``redis_port``/``redis_password``: what LiteLLM's router tracks usage and
cooldowns in), then the response cache's (``litellm_settings.cache_params`` with ``type:
redis``), then LiteLLM's environment variables (``REDIS_URL``, else ``REDIS_HOST`` +
``REDIS_PORT`` with ``REDIS_PASSWORD``, ``REDIS_USERNAME``, ``REDIS_SSL``). As in LiteLLM
(``_redis._get_redis_client_logic``), a setting the config leaves out is taken from those
variables, a URL names the whole connection, and a host named in the config outranks
``REDIS_URL``. A Cluster or Sentinel setup (``startup_nodes``, ``sentinel_nodes``) is not
taken: give the store its own URL then."""

from __future__ import annotations

import os
from typing import Mapping, Optional
from urllib.parse import quote

_ENV = {"url": "REDIS_URL", "host": "REDIS_HOST", "port": "REDIS_PORT", "password": "REDIS_PASSWORD",
        "username": "REDIS_USERNAME", "ssl": "REDIS_SSL", "db": "REDIS_DB"}


def _value(v):
    """A config value, with LiteLLM's ``os.environ/NAME`` references read."""
    if isinstance(v, str) and v.startswith("os.environ/"):
        return os.environ.get(v[len("os.environ/"):]) or None
    return v


def _true(v) -> bool:
    return v is True or (isinstance(v, str) and v.strip().lower() in ("true", "1", "yes"))


def redis_url(settings: Mapping) -> Optional[str]:
    """The URL of the connection `settings` (a RedisCache's keyword arguments) names, filled
    from LiteLLM's environment variables; None when it names no single server."""
    given = {k: _value(v) for k, v in settings.items() if _value(v) is not None}
    if given.get("startup_nodes") or given.get("sentinel_nodes"):
        return None
    env = {k: os.environ[name] for k, name in _ENV.items() if os.environ.get(name)}
    if given.get("host") is not None and given.get("url") is None:
        env.pop("url", None)
    kw = {**env, **given}
    if kw.get("url"):
        return str(kw["url"])
    host = kw.get("host")
    if not host:
        return None
    auth = ""
    if kw.get("password"):
        auth = f"{quote(str(kw.get('username') or ''), safe='')}:{quote(str(kw['password']), safe='')}@"
    db = kw.get("db")
    return (f"{'rediss' if _true(kw.get('ssl')) else 'redis'}://{auth}{host}:{kw.get('port') or 6379}"
            + (f"/{db}" if db not in (None, "") else ""))


def litellm_redis(router) -> Optional[tuple[str, str]]:
    """(URL, where it came from) of the Redis LiteLLM is configured with, or None."""
    cache = getattr(getattr(router, "cache", None), "redis_cache", None)
    kwargs = getattr(cache, "redis_kwargs", None)
    if isinstance(kwargs, Mapping):
        url = redis_url(kwargs)
        if url:
            return url, "router_settings (redis_url or redis_host/redis_port/redis_password)"
    import litellm

    response_cache = getattr(litellm, "cache", None)
    kind = getattr(response_cache, "type", None)
    if getattr(kind, "value", kind) == "redis":
        kwargs = getattr(getattr(response_cache, "cache", None), "redis_kwargs", None)
        url = redis_url(kwargs) if isinstance(kwargs, Mapping) else None
        if url:
            return url, "litellm_settings.cache_params (type: redis)"
    url = redis_url({})
    if url:
        return url, "REDIS_URL" if os.environ.get("REDIS_URL") else "REDIS_HOST/REDIS_PORT"
    return None
