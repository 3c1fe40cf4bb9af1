"""What the plugin's routes, start-up log and policy watcher read of the plugin they serve, as a
Protocol: they are handed the plugin (the callback) as an argument and import nothing above them,
so the callback, which builds them, is the only module that names the concrete class."""

from __future__ import annotations

from typing import Any, Optional, Protocol

from .runtime import Runtime


class PluginHost(Protocol):
    runtime: Optional[Runtime]
    observer: Any  # observability.Observer: metrics, decision log, routing page
    watcher: Any  # reload.PolicyWatcher, once started
    fault: Optional[str]  # why the plugin stands aside (plain models served, aliases 503), else None
    empty_aliases: list
    group_installs: int

    def available_aliases(self) -> list[str]: ...

    def apply_policy(self, loaded, engine=None) -> None: ...
