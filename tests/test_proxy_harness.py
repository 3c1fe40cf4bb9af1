"""The proxy harness itself: a real LiteLLM proxy (no plugin) in front of a simulated upstream,
restarted on the same port, stopped for good, and a proxy that cannot start reported with its
log instead of a hang."""

from __future__ import annotations

import socket

import openai
import pytest

from proxy_harness import ProxyError, deployment, parse_reply, start_proxy, start_upstreams, stop_upstreams

pytestmark = pytest.mark.proxy  # starts a LiteLLM proxy: not in the fast suite, `pytest -m "not proxy"`


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    ups = start_upstreams([{"name": "solo", "input_cost_per_1m": 3.0, "output_cost_per_1m": 6.0}])
    proxy = start_proxy({"model_list": [deployment("solo-model", ups[0], id="solo-1")]},
                        tmp_path_factory.mktemp("proxy"))
    yield proxy, ups[0]
    proxy.stop()
    stop_upstreams(ups)


def _ask(proxy):
    client = openai.OpenAI(base_url=proxy.base_url, api_key=proxy.master_key, max_retries=0, timeout=30)
    return client.chat.completions.with_raw_response.create(model="solo-model",
                                                            messages=[{"role": "user", "content": "hello"}])


def test_deployment_entry_carries_id_and_per_token_prices(setup):
    _, up = setup
    d = deployment("x", up, id="x-1", aisia={"local": True})
    assert d["model_info"] == {"id": "x-1", "input_cost_per_token": 3e-06, "output_cost_per_token": 6e-06,
                               "aisia": {"local": True}}
    assert d["litellm_params"]["api_base"] == up.base_url and d["litellm_params"]["model"] == "openai/solo"


def test_proxy_serves_the_upstream_behind_its_master_key(setup):
    proxy, up = setup
    assert proxy.base_url == proxy.url + "/v1" and proxy.url.startswith("http://127.0.0.1:")
    raw = _ask(proxy)
    assert raw.headers["x-litellm-model-id"] == "solo-1"
    assert parse_reply(raw.parse().choices[0].message.content)[0] == "solo"
    assert float(raw.headers["x-litellm-response-cost"]) > 0  # the per-token prices reached LiteLLM
    with pytest.raises(openai.APIStatusError) as exc:
        openai.OpenAI(base_url=proxy.base_url, api_key="sk-wrong", max_retries=0).chat.completions.create(
            model="solo-model", messages=[{"role": "user", "content": "hello"}])
    assert exc.value.status_code in (400, 401)  # without a database LiteLLM answers 400 "No connected db"
    assert up.stats()["calls"] >= 1
    assert "Uvicorn running" in proxy.logs() or "Application startup complete" in proxy.logs()


def test_restart_comes_back_on_the_same_port(setup):
    proxy, _ = setup
    url = proxy.url
    proxy.restart()
    assert proxy.url == url and proxy.running()
    assert _ask(proxy).headers["x-litellm-model-id"] == "solo-1"


def test_a_proxy_that_dies_at_start_up_is_reported_with_its_log(tmp_path):
    config = {"model_list": [], "litellm_settings": {"callbacks": ["no_such_module_for_aisia.plugin"]}}
    with pytest.raises(ProxyError) as exc:
        start_proxy(config, tmp_path, timeout_s=60)
    message = str(exc.value)
    assert "exited with status" in message and "no_such_module_for_aisia" in message


def test_a_taken_port_is_refused_before_starting(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        with pytest.raises(ProxyError, match="already in use"):
            start_proxy({"model_list": []}, tmp_path, port=s.getsockname()[1])


def test_a_missing_litellm_is_a_clear_error(tmp_path, monkeypatch):
    from aisia_plugin.demo import proxy as proxy_module

    monkeypatch.setattr(proxy_module.sys, "executable", str(tmp_path / "bin" / "python"))
    with pytest.raises(ProxyError, match=r"not installed in this environment .*pip install 'litellm\[proxy\]"):
        start_proxy({"model_list": []}, tmp_path)
