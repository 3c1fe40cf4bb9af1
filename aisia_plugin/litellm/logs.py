"""The plugin's lines in the proxy's log, as LiteLLM writes its own: through LiteLLM's handler
(``litellm._logging.handler``: time, logger and level, source line; JSON with ``JSON_LOGS``;
its secret redaction), at the level of LiteLLM's proxy logger (which ``--debug``,
``--detailed_debug`` and ``LITELLM_LOG`` set), and once each (not again through a root handler). With LiteLLM's default logging only WARNING and above show: the one line that
says the plugin serves is a WARNING."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ..policy.errors import PolicyError

if TYPE_CHECKING:
    from .host import PluginHost

# The plugin's loggers: aisia_plugin.* (the proxy integration, plugins, the decision log) and
# aisia.* (the state stores).
LOGGER_NAMES = ("aisia_plugin", "aisia")

log = logging.getLogger("aisia_plugin.litellm")


def use_litellm_handler() -> None:
    """Write the plugin's records with LiteLLM's own handler (inside the proxy only: a program
    that imports the plugin keeps its own logging). Idempotent."""
    from litellm._logging import handler, verbose_proxy_logger

    # The proxy sets its loggers' level (proxy_server.initialize: --debug INFO, --detailed_debug
    # DEBUG, else LITELLM_LOG) before it loads the config that imports the plugin; unset, they
    # stay at the root's WARNING, and so do these.
    level = verbose_proxy_logger.level or None
    for name in LOGGER_NAMES:
        logger = logging.getLogger(name)
        if handler not in logger.handlers:
            logger.addHandler(handler)
        logger.propagate = False
        if level is not None:
            logger.setLevel(level)


def policy_error_text(exc: PolicyError) -> str:
    """A policy's issues, one located line each (``file:line:column: field: message``), as
    ``aisia validate`` prints them."""
    return "\n".join(i.format() for i in exc.issues) or str(exc)


def log_policy_error(exc: PolicyError) -> None:
    """An invalid policy at start: its located lines alone (no traceback: they say all there is)."""
    log.critical("aisia: the policy is invalid:\n%s", policy_error_text(exc))


def store_description(store) -> str:
    """The state store in a log line: its kind and where it keeps state (a Redis URL without its
    password)."""
    url = getattr(store, "url", None)
    if url:
        from ..state.redis import redact

        return f"redis {redact(url)}"
    snapshot = getattr(store, "snapshot_path", None)
    return f"memory (snapshot {snapshot})" if snapshot else "memory"


def log_started(plugin: "PluginHost") -> None:
    """The one WARNING line that says the plugin is serving: its aliases, its store, its files."""
    rt = plugin.runtime
    aliases = plugin.available_aliases()
    files = ", ".join(str(f) for f in rt.loaded.files) or "(none)"
    shipped = " over the shipped defaults" if rt.loaded.default_files else ""
    log.warning("aisia: serving %d aliases: %s; state store: %s; policy files: %s%s", len(aliases),
                ", ".join(aliases) or "(none)", store_description(rt.store), files, shipped)
