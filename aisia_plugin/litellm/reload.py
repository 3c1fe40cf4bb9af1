"""Hot reload: the policy files are polled off the request path; a valid edit replaces the
engine, an invalid one is logged once (located, as ``aisia validate`` prints it) and the last
good policy keeps serving. A setting the proxy reads at start only (the schema marks them:
``schema_defaults.start_only_settings``; the state store's, ``proxy.fail_closed``) is not
applied by a reload: the reload says so ("state.backend changed: restart to apply"), in the log
and in ``GET /aisia/policy``, and ``GET /aisia/health`` says ``degraded`` while the running
policy differs from the files (``PolicyWatcher.differences``)."""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from ..policy.errors import PolicyError
from ..policy.loader import default_policy_paths, expand_paths, load_policy_with_locations
from ..schema_defaults import start_only_settings
from .groups import AliasCollision
from .logs import policy_error_text

if TYPE_CHECKING:
    from .host import PluginHost

log = logging.getLogger("aisia_plugin.litellm")


# A file modified this recently is hashed even when its stat looks unchanged: an edit within the
# file system's timestamp granularity that keeps the size (and the inode) would not show.
RECENT_MTIME_S = 2.0


class PolicyFiles:
    """What identifies the policy's files now, each file's content hash, cheaply: a poll stats
    every file and hashes only those whose stat (size, mtime, ctime, inode) changed since the
    previous poll, or whose mtime is recent. ``unchanged`` only stats (the event loop may call
    it); ``fingerprint`` may read files: call it in a thread."""

    def __init__(self, paths: list[Path]):
        self.paths = paths
        self._known: dict[str, tuple[tuple, str]] = {}  # file -> (stat stamp, content hash)
        self.hashed = 0  # files read and hashed so far

    def _stamped(self) -> list:
        """(file, its stat stamp, or None when it cannot be read) for every policy file, now."""
        files, _ = expand_paths(self.paths)
        out = []
        for f in files:
            try:
                st = f.stat()
            except OSError:
                out.append((f, None))
                continue
            out.append((f, (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)))
        return out

    def _hash_kept(self, name: str, stamp: tuple, now: float) -> Optional[str]:
        """The last poll's hash of `name` when its stat is the same and not recent, else None."""
        previous = self._known.get(name)
        if previous is not None and previous[0] == stamp and now - stamp[1] / 1e9 > RECENT_MTIME_S:
            return previous[1]
        return None

    def unchanged(self) -> bool:
        """Whether ``fingerprint`` would now return what it last returned, known without reading
        a file: the same files, each with the stat it had and none recent (a missing file, a
        new one or a recent edit answers False: the caller then fingerprints)."""
        now = time.time()
        stamped = self._stamped()
        return len(stamped) == len(self._known) and all(
            stamp is not None and self._hash_kept(str(f), stamp, now) is not None for f, stamp in stamped)

    def fingerprint(self) -> tuple:
        now = time.time()
        known, out = {}, []
        for f, stamp in self._stamped():
            name = str(f)
            digest = self._hash_kept(name, stamp, now) if stamp is not None else None
            if digest is None and stamp is not None:
                try:
                    digest = hashlib.sha256(f.read_bytes()).hexdigest()
                    self.hashed += 1
                except OSError:
                    stamp = None
            if stamp is None:
                out.append((name, "missing"))
                continue
            known[name] = (stamp, digest)
            out.append((name, digest))
        self._known = known
        return tuple(out)


def setting_of(policy, path: str):
    """The value of the dotted setting `path` ("state.backend") in a loaded policy."""
    value = policy
    for name in path.split("."):
        value = getattr(value, name)
    return value


def restart_needed(started, edited) -> list[str]:
    """The settings read at start only whose value in `edited` differs from the one the proxy
    started with, each as "state.backend changed (memory -> redis): restart to apply"."""
    out = []
    for path in start_only_settings():
        before, after = setting_of(started, path), setting_of(edited, path)
        if before != after:
            out.append(f"{path} changed ({before!r} -> {after!r}): restart to apply")
    return out


class PolicyWatcher:
    def __init__(self, plugin: "PluginHost", paths=None):
        self.plugin = plugin
        self.paths = list(paths) if paths is not None else default_policy_paths()
        self.files = PolicyFiles(self.paths)
        self._seen: Optional[tuple] = None
        self.last_error: Optional[str] = None
        # The policy the proxy started with: the settings read at start only keep its values.
        self.started = plugin.runtime.policy
        self.restart_pending: list[str] = []  # restart_needed(started, the policy served now)
        self._task: Optional[asyncio.Task] = None
        self.reloads = 0
        self.checks = 0

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    async def _run(self) -> None:
        self._seen = await asyncio.to_thread(self.files.fingerprint)
        while True:
            # The serving policy's own interval (a reload may change it); 0 stops watching.
            interval = self.plugin.runtime.policy.proxy.reload_interval_s
            if interval <= 0:
                return
            await asyncio.sleep(interval)
            try:
                await self.check()
            except Exception:  # the watcher must outlive any surprise
                log.exception("aisia: policy reload check failed")

    async def check(self) -> bool:
        self.checks += 1
        # Stats alone, in the loop: handing an unchanged poll to a thread every second cost an
        # idle proxy more CPU than everything else the plugin runs in the background.
        if self.files.unchanged():
            return False
        now = await asyncio.to_thread(self.files.fingerprint)
        if now == self._seen:
            return False
        self._seen = now
        try:
            loaded = await asyncio.to_thread(load_policy_with_locations, self.paths)
        except PolicyError as exc:
            self._reject(policy_error_text(exc))
            return False
        try:
            engine = await asyncio.to_thread(self.plugin.runtime.new_engine, loaded.policy)
        except Exception as exc:  # a policy the validator passed but the engine cannot build
            self._reject(f"the policy cannot be served: {exc}")
            return False
        try:
            self.plugin.apply_policy(loaded, engine)
        except AliasCollision as exc:
            self._reject(str(exc))
            return False
        self.last_error = None
        self.reloads += 1
        self.restart_pending = restart_needed(self.started, loaded.policy)
        self.plugin.observer.reloaded("ok")
        log.warning("aisia: policy reloaded from %s (%d aliases)%s", os.pathsep.join(map(str, self.paths)),
                    len(loaded.policy.aliases),
                    "".join("; " + text for text in self.restart_pending))
        return True

    def differences(self) -> list[str]:
        """How the policy this worker serves differs from its files (empty: not at all): an edit
        rejected (the last good policy serves), settings changed that apply at the next start."""
        out = []
        if self.last_error is not None:
            out.append("the policy files are rejected, the last good policy serves: " + self.last_error)
        return out + self.restart_pending

    def _reject(self, text: str) -> None:
        self.plugin.observer.reloaded("invalid")
        if text != self.last_error:  # logged once per distinct error, not once per poll
            self.last_error = text
            log.error("aisia: the edited policy is invalid; the last good policy keeps serving:\n%s", text)
