"""A LiteLLM `general_settings: custom_auth` function for tests/test_admin_roles.py and
tests/test_litellm_model_access.py: LiteLLM's own auth, as a proxy with virtual keys would run it,
but with the keys read from $AISIA_TEST_ROLE_KEYS (JSON, {key: LiteLLM user role} or
{key: {"role": ..., "models": [...], and any other UserAPIKeyAuth field: "team_id", "team_alias",
"metadata", "team_models", budgets...}}) instead of LiteLLM's Postgres database, which needs
Prisma's engines (downloaded at first use: not on this machine). LiteLLM consults it for every key
presented to its auth, the master key included (which it maps to proxy_admin, as LiteLLM's own
master-key path does). Each call prints one line to the proxy's log, so that a test can see the
function was consulted (the route and the role, never the key). A key's spec may also carry the
team fields LiteLLM's auth sets from its team table (``team_id``, ``team_max_budget``,
``team_spend``, ``team_metadata``, ...), as a database-backed proxy would return them."""

from __future__ import annotations

import json
import os
import secrets

from fastapi import Request
from litellm.proxy._types import LitellmUserRoles, UserAPIKeyAuth



def _bare(api_key: str) -> str:
    key = (api_key or "").strip()
    return key[7:].strip() if key.lower().startswith("bearer ") else key


async def user_api_key_auth(request: Request, api_key: str) -> UserAPIKeyAuth:
    from litellm.proxy import proxy_server

    key = _bare(api_key)
    keys = json.loads(os.environ.get("AISIA_TEST_ROLE_KEYS", "{}"))
    master = proxy_server.master_key
    spec = None
    if isinstance(master, str) and key and secrets.compare_digest(key.encode(), master.encode()):
        spec = {"role": LitellmUserRoles.PROXY_ADMIN.value}
    else:
        spec = next((s for k, s in keys.items() if key and secrets.compare_digest(key.encode(), k.encode())), None)
    spec = {"role": spec} if isinstance(spec, str) else spec
    role = spec["role"] if spec else None
    print(f"aisia-test-custom-auth: {request.url.path} -> {role}", flush=True)
    if spec is None:
        raise Exception("aisia-test-custom-auth: unknown key")
    # The team fields LiteLLM's database would join to the key (team_id, team_alias, the key's
    # metadata, team_models, budgets...): any UserAPIKeyAuth field the spec gives.
    extra = {k: v for k, v in spec.items() if k not in ("role", "models") and k in UserAPIKeyAuth.model_fields}
    return UserAPIKeyAuth(api_key=key, user_id=f"user-{role}", user_role=LitellmUserRoles(role),
                          models=spec.get("models", []), **extra)
