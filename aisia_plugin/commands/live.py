"""A running proxy's state, read over its admin route (`GET /admin/bandit/stats`) with the proxy
admin's key: for `aisia stats --url` and `aisia explain --url`. The memory store keeps its state
in the proxy's process; this is how a command sees it without a snapshot."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request

STATS_ROUTE = "/admin/bandit/stats"
# The same route's full state (what a snapshot holds), for a decision made as the proxy makes it.
STATE_QUERY = "?format=state"


class LiveError(Exception):
    """The proxy could not be read: the message says why (unreachable, refused key, not JSON)."""


def add_arguments(p) -> None:
    p.add_argument("--url", metavar="URL",
                   help="a running proxy (http://host:4000): read its live state over " + STATS_ROUTE)
    p.add_argument("--key", metavar="KEY",
                   help="with --url: the proxy admin's key (default: $LITELLM_MASTER_KEY)")


RESET_ROUTE = "/admin/bandit/reset"


def fetch(url: str, key: str | None, query: str = "", timeout: float = 30.0) -> dict:
    """The JSON object the proxy at `url` answers on its stats route."""
    return _call(url.rstrip("/") + STATS_ROUTE + query, key, None, timeout)


def reset(url: str, key: str | None, deployment_id: str, timeout: float = 30.0) -> dict:
    """Ask the proxy at `url` to forget a deployment's statistics and breaker."""
    return _call(url.rstrip("/") + RESET_ROUTE, key, {"deployment_id": deployment_id}, timeout)


def _call(target: str, key: str | None, body, timeout: float) -> dict:
    key = key or os.environ.get("LITELLM_MASTER_KEY")
    if not key:
        raise LiveError("--url needs the proxy admin's key: give --key KEY or set LITELLM_MASTER_KEY")
    headers = {"Authorization": f"Bearer {key}"}
    data = None
    if body is not None:
        data, headers["Content-Type"] = json.dumps(body).encode(), "application/json"
    request = urllib.request.Request(target, data=data, headers=headers, method="POST" if body is not None else "GET")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            body = response.read()
    except urllib.error.HTTPError as exc:
        detail = exc.read()[:300].decode("utf-8", errors="replace")
        raise LiveError(f"{target} answered {exc.code}: {detail}") from None
    except (urllib.error.URLError, OSError) as exc:
        raise LiveError(f"cannot reach {target}: {getattr(exc, 'reason', exc)}") from None
    try:
        data = json.loads(body)
    except ValueError:
        raise LiveError(f"{target} did not answer JSON: {body[:120]!r}") from None
    if not isinstance(data, dict):
        raise LiveError(f"{target} answered {type(data).__name__}, not a JSON object")
    return data

