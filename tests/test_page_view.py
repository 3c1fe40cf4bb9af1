"""Who reads the routing page (aisia_plugin/litellm/page_view.py) and what its session seals
(session.py): the proxy admin, a team's key with its team, no view for a key of no team; a sealed
session opens with its role and team, and one whose role and team do not fit is not a session."""

from __future__ import annotations

import json
import os
import time

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # importing litellm must not reach the network

from litellm.proxy._types import LitellmUserRoles, UserAPIKeyAuth

from aisia_plugin.litellm.page_view import Viewer, viewer_of
from aisia_plugin.litellm.session import SEAL_PREFIX, seal, unseal


def test_the_viewer_comes_from_what_litellms_auth_resolved():
    admin = viewer_of(UserAPIKeyAuth(api_key="sk-1", user_role=LitellmUserRoles.PROXY_ADMIN, team_id="team-a"))
    assert admin.admin and admin.team is None and admin.role == "admin"
    team = viewer_of(UserAPIKeyAuth(api_key="sk-2", user_role=LitellmUserRoles.INTERNAL_USER, team_alias="alpha"))
    assert not team.admin and team.team == "alpha" and team.role == "team"
    by_id = viewer_of(UserAPIKeyAuth(api_key="sk-3", user_role=LitellmUserRoles.INTERNAL_USER, team_id="t-1",
                                     team_alias="alpha"))
    assert by_id.team == "t-1"  # its figures' label: the id, else the alias
    assert viewer_of(UserAPIKeyAuth(api_key="sk-4", user_role=LitellmUserRoles.INTERNAL_USER)) is None
    assert viewer_of(UserAPIKeyAuth(api_key="sk-5", user_role=LitellmUserRoles.PROXY_ADMIN_VIEW_ONLY)) is None


def test_a_session_seals_its_role_and_team(monkeypatch):
    from litellm.proxy.common_utils.encrypt_decrypt_utils import encrypt_bearer_token

    monkeypatch.setenv("LITELLM_SALT_KEY", "aisia-test-salt")
    now = time.time()
    s = unseal(seal("sk-a", now, Viewer(False, "team-a")), now)
    assert (s.key, s.role, s.team) == ("sk-a", "team", "team-a")
    s = unseal(seal("sk-m", now, Viewer(True)), now)
    assert (s.role, s.team) == ("admin", None)
    assert unseal(seal("sk-a", now, Viewer(False, "team-a")), now + 9 * 3600) is None  # expired

    def sealed(**fields):
        opened = {"key": "sk-a", "exp": int(now) + 60, "sid": "s1", "role": "team", "team": "team-a", **fields}
        return encrypt_bearer_token(json.dumps(opened), SEAL_PREFIX)

    assert unseal(sealed(), now) is not None
    for bad in ({"role": "team", "team": None}, {"role": "admin", "team": "team-a"}, {"role": "root"},
                {"role": "team", "team": ""}, {"team": 7}):
        assert unseal(sealed(**bad), now) is None, bad
    old = encrypt_bearer_token(json.dumps({"key": "sk-a", "exp": int(now) + 60, "sid": "s1"}), SEAL_PREFIX)
    assert unseal(old, now) is None  # sealed before the role was: signed in again
