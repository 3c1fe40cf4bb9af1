"""A second LiteLLM callback for tests: routes that change the proxy's Router at run time, as
LiteLLM itself does when a model is added through its database (``/model/new`` ->
``Router.add_deployment``) or its config is reloaded (a new Router in
``proxy_server.llm_router``), neither of which this machine can do without Postgres.

``litellm_settings: {callbacks: ["aisia_plugin.litellm.plugin", "router_changes.changer"]}``
with this directory on PYTHONPATH mounts, without a key:

- ``POST /test/add-deployment`` (a model_list entry as the body): ``Router.add_deployment``;
- ``POST /test/rebuild-router``: a new Router from the current model list and settings."""

from __future__ import annotations

import asyncio

# At module level: FastAPI resolves the routes' annotations (postponed, as strings) in these globals.
from fastapi import Request
from litellm.integrations.custom_logger import CustomLogger


class RouterChanger(CustomLogger):
    pass


async def _mount() -> None:
    from litellm.proxy import proxy_server

    while proxy_server.llm_router is None:
        await asyncio.sleep(0.05)

    async def add_deployment(request: Request):
        from litellm.types.router import Deployment

        body = await request.json()
        added = proxy_server.llm_router.add_deployment(Deployment(**body))
        return {"added": added is not None, "models": len(proxy_server.llm_router.model_list)}

    async def rebuild_router():
        import litellm

        old = proxy_server.llm_router
        models = [{"model_name": d["model_name"], "litellm_params": dict(d["litellm_params"]),
                   "model_info": dict(d.get("model_info") or {})} for d in old.model_list
                  if d["model_name"] not in {g.get("group_name") for g in old.get_settings().get("routing_groups") or ()}]
        proxy_server.llm_router = litellm.Router(model_list=models, routing_strategy="simple-shuffle")
        return {"rebuilt": True, "models": len(models)}

    app = proxy_server.app
    app.add_api_route("/test/add-deployment", add_deployment, methods=["POST"], include_in_schema=False)
    app.add_api_route("/test/rebuild-router", rebuild_router, methods=["POST"], include_in_schema=False)
    routes = app.router.routes  # ahead of the proxy's catch-all routes
    ours = [r for r in routes if getattr(r, "path", "").startswith("/test/")]
    routes[:] = ours + [r for r in routes if r not in ours]


changer = RouterChanger()
try:
    _task = asyncio.get_running_loop().create_task(_mount())
except RuntimeError:  # imported outside a running proxy
    _task = None
