"""The plugin's log lines at LiteLLM's level: the proxy sets its loggers' level from `--debug`,
`--detailed_debug` or `LITELLM_LOG` before it imports the plugin, and the plugin's loggers take
that level, not their own reading of `LITELLM_LOG` (which `--detailed_debug` leaves unset)."""

from __future__ import annotations

import logging
import os

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")  # importing litellm must not reach the network

import pytest  # noqa: E402
from litellm._logging import handler, verbose_proxy_logger

from aisia_plugin.litellm.logs import LOGGER_NAMES, use_litellm_handler  # noqa: E402


@pytest.fixture
def restored_loggers():
    ours = [logging.getLogger(n) for n in LOGGER_NAMES]
    saved = [(lg.level, lg.propagate, list(lg.handlers)) for lg in ours]
    proxy_level = verbose_proxy_logger.level
    yield ours
    verbose_proxy_logger.setLevel(proxy_level)
    for lg, (level, propagate, handlers) in zip(ours, saved):
        lg.setLevel(level)
        lg.propagate = propagate
        lg.handlers[:] = handlers


@pytest.mark.parametrize("level", [logging.DEBUG, logging.INFO])
def test_the_plugin_s_loggers_take_litellm_s_level(restored_loggers, monkeypatch, level):
    monkeypatch.delenv("LITELLM_LOG", raising=False)  # as with `litellm --detailed_debug` (or --debug)
    verbose_proxy_logger.setLevel(level)  # what proxy_server.initialize does for those flags
    use_litellm_handler()
    for lg in restored_loggers:
        assert lg.level == level and lg.getEffectiveLevel() == level, lg.name
        assert handler in lg.handlers and not lg.propagate


def test_unset_they_keep_the_default(restored_loggers, monkeypatch):
    monkeypatch.setenv("LITELLM_LOG", "DEBUG")  # read by LiteLLM at its start, not here
    verbose_proxy_logger.setLevel(logging.NOTSET)
    for lg in restored_loggers:
        lg.setLevel(logging.NOTSET)
    use_litellm_handler()
    for lg in restored_loggers:
        assert lg.level == logging.NOTSET, lg.name
