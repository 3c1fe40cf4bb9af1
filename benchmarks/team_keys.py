"""LiteLLM's ``general_settings: custom_auth`` for conversation_bench.py's ``ours:teams`` arm: the
simulated users come through one virtual key per team, as a proxy with LiteLLM's key database
would authenticate them (that database needs Prisma's engines, which are not on this machine).
The proxy's master key is its admin, as LiteLLM's own master-key path makes it; a key of
``team_keys(n)`` is an internal user of its own team; any other key is refused."""

from __future__ import annotations

import secrets

from fastapi import Request
from litellm.proxy._types import LitellmUserRoles, UserAPIKeyAuth

PREFIX = "sk-bench-team-"
CALLBACK = "team_keys.user_api_key_auth"  # the setting's value (this folder on the proxy's PYTHONPATH)


def team_keys(n: int) -> list[str]:
    """The keys of `n` teams, the i-th team's key i-th."""
    return [f"{PREFIX}{i}" for i in range(n)]


def _bare(api_key: str) -> str:
    key = (api_key or "").strip()
    return key[7:].strip() if key.lower().startswith("bearer ") else key


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    from litellm.proxy import proxy_server

    key = _bare(api_key)
    master = proxy_server.master_key
    if isinstance(master, str) and key and secrets.compare_digest(key.encode(), master.encode()):
        return UserAPIKeyAuth(api_key=key, user_id="admin", user_role=LitellmUserRoles.PROXY_ADMIN)
    team = key[len(PREFIX):] if key.startswith(PREFIX) else ""
    if not team.isdigit():
        raise Exception("conversation_bench: unknown key")
    return UserAPIKeyAuth(api_key=key, user_id=f"user-{team}", user_role=LitellmUserRoles.INTERNAL_USER,
                          team_id=f"team-{team}")
