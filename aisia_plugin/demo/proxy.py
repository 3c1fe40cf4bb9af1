"""Start a real LiteLLM proxy process for the demo, the tests and the benchmarks.

The proxy runs fully offline (LiteLLM's bundled cost map and lists, no database), with a master
key, its output in a log file, and is considered up when `/health/liveliness` answers. Nothing
here imports LiteLLM: the proxy is the `litellm` script of the running interpreter's
environment, spoken to over HTTP."""

from __future__ import annotations

import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Callable, Mapping, Optional

import yaml

# LiteLLM downloads these at start-up unless told to use the copies it ships.
OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOCAL_BLOG_POSTS": "True",
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True",
    "LITELLM_LOCAL_AUTOROUTER_PRESETS": "True",
    "LITELLM_LOCAL_POLICY_TEMPLATES": "True",
}
# Inherited settings that would make the proxy reach outside this machine or a database.
_DROPPED_ENV = ("DATABASE_URL", "DIRECT_URL", "REDIS_URL", "LITELLM_MASTER_KEY")
_LOG_TAIL_LINES = 40


class ProxyError(RuntimeError):
    """The proxy could not be started (the message says why, with the log's tail when it ran)."""


# The ports free_port has handed out in this process (a few per proxy started: far below the range).
_HANDED_OUT: set[int] = set()
_HANDED_OUT_LOCK = threading.Lock()


def free_port(host: str = "127.0.0.1") -> int:
    """A port nothing listens on now, and never one this process handed out before: the kernel
    gives a port just released to a later bind as readily as any other, and two proxies made
    side by side were once given the same one (the second then refused to start: "already in
    use"). After 100 draws of known ports, the last one drawn (the range is then nearly spent)."""
    with _HANDED_OUT_LOCK:
        for _ in range(100):
            with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
            if port not in _HANDED_OUT:
                break
        _HANDED_OUT.add(port)
        return port


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether a server could listen on the port now (as uvicorn does, with SO_REUSEADDR: the
    connections a stopped proxy leaves in TIME_WAIT do not count)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
        return True


def litellm_executable() -> Path:
    """The `litellm` script installed next to the running interpreter (the same environment)."""
    exe = Path(sys.executable).parent / ("litellm.exe" if os.name == "nt" else "litellm")
    if not exe.exists():
        raise ProxyError(f"the LiteLLM proxy is not installed in this environment ({exe} is missing); "
                         f"install it with: {sys.executable} -m pip install 'litellm[proxy]>=1.108,<1.110'")
    return exe


def deployment(name: str, upstream, *, litellm_params: Optional[Mapping[str, Any]] = None, **model_info) -> dict:
    """A LiteLLM `model_list` entry named `name` served by a simulated upstream (a
    `RunningUpstream`, or a base URL string): `model_info.id` is set (default: `name`) and the
    upstream's prices are given per token so that LiteLLM computes `response_cost`. Keyword
    arguments go to `model_info` (e.g. `id="coder-1"`, `aisia={"local": True}`);
    `litellm_params` entries override the generated ones."""
    if isinstance(upstream, str):
        base_url, model, prices = upstream, name, (0.0, 0.0)
    else:
        spec = upstream.spec
        base_url, model = upstream.base_url, spec.model_id
        prices = (spec.input_cost_per_1m, spec.output_cost_per_1m)
    info = {"id": name,
            "input_cost_per_token": prices[0] / 1e6,
            "output_cost_per_token": prices[1] / 1e6}
    info.update(model_info)
    params = {"model": f"openai/{model}", "api_base": base_url, "api_key": "sk-fake-upstream"}
    params.update(litellm_params or {})
    return {"model_name": name, "litellm_params": params, "model_info": info}


def _tail(path: Path, lines: int = _LOG_TAIL_LINES) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:]) or "(empty log)"


class Proxy:
    """A LiteLLM proxy process. `start()` returns once `/health/liveliness` answers 200."""

    def __init__(self, config: Mapping[str, Any], workdir, env: Optional[Mapping[str, str]] = None,
                 num_workers: int = 1, timeout_s: float = 90, port: Optional[int] = None,
                 master_key: Optional[str] = None, host: str = "127.0.0.1"):
        self.workdir = Path(workdir)
        self.workdir.mkdir(parents=True, exist_ok=True)
        self.host = host
        self.port = port or free_port(host)
        self.num_workers = int(num_workers)
        self.timeout_s = float(timeout_s)
        self.extra_env = dict(env or {})
        config = dict(config)
        general = dict(config.get("general_settings") or {})
        configured = general.get("master_key")
        if master_key is None and isinstance(configured, str) and configured.startswith("os.environ/"):
            # A config that reads its key from the environment (as LiteLLM does) keeps doing so.
            name = configured.split("/", 1)[1]
            self.master_key = self.extra_env.get(name) or (os.environ.get(name) if name not in _DROPPED_ENV else None)
            if not self.master_key:
                raise ProxyError(f"the config's master key comes from ${name}, which is not set")
        else:
            self.master_key = master_key or configured or ("sk-aisia-" + secrets.token_hex(12))
            general["master_key"] = self.master_key
        config["general_settings"] = general
        self.config = config
        self.config_path = self.workdir / "litellm_config.yaml"
        self.log_path = self.workdir / "litellm.log"
        self._proc: Optional[subprocess.Popen] = None
        self._log = None

    # -- addresses ----------------------------------------------------------------------------
    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        return self.url + "/v1"

    @property
    def headers(self) -> dict:
        return {"Authorization": f"Bearer {self.master_key}"}

    @property
    def pid(self) -> Optional[int]:
        return self._proc.pid if self._proc else None

    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        return _tail(self.log_path, lines)

    # -- life cycle ---------------------------------------------------------------------------
    def _environment(self) -> dict:
        env = {k: v for k, v in os.environ.items() if k not in _DROPPED_ENV}
        env.update(OFFLINE_ENV)
        env["PYTHONUNBUFFERED"] = "1"
        env.update(self.extra_env)
        return env

    def start(self, on_wait: Optional[Callable[[float], None]] = None) -> "Proxy":
        """Start the process and wait until it serves; `on_wait(elapsed_s)` is called while
        waiting (a progress indication). Raises ProxyError with the log's tail on failure."""
        if self.running():
            return self
        exe = litellm_executable()
        if not port_is_free(self.port, self.host):
            raise ProxyError(f"port {self.port} on {self.host} is already in use; choose another one")
        self.config_path.write_text(yaml.safe_dump(self.config, sort_keys=False))
        cmd = [str(exe), "--config", str(self.config_path), "--host", self.host, "--port", str(self.port)]
        if self.num_workers > 1:
            # uvicorn's supervisor restarts a worker that does not answer its health check within
            # 5 s, and a LiteLLM worker busy importing and loading its config on a loaded
            # machine may not: it would be restarted forever.
            cmd += ["--num_workers", str(self.num_workers), "--timeout_worker_healthcheck", "120"]
        self._log = open(self.log_path, "ab")
        # Its own session: a Ctrl-C in the user's terminal reaches the demo, which stops the
        # proxy in order, instead of reaching every process at once.
        self._proc = subprocess.Popen(cmd, cwd=str(self.workdir), env=self._environment(), stdin=subprocess.DEVNULL,
                                      stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True)
        started = time.monotonic()
        while True:
            elapsed = time.monotonic() - started
            code = self._proc.poll()
            if code is not None:
                self._close_log()
                self._proc = None
                raise ProxyError(f"the LiteLLM proxy exited with status {code} during start-up; "
                                 f"last lines of {self.log_path}:\n{_tail(self.log_path)}")
            if self._alive():
                return self
            if elapsed > self.timeout_s:
                self.stop()
                raise ProxyError(f"the LiteLLM proxy did not answer {self.url}/health/liveliness within "
                                 f"{self.timeout_s:g} s; last lines of {self.log_path}:\n{_tail(self.log_path)}")
            if on_wait:
                on_wait(elapsed)
            time.sleep(0.2)

    def _alive(self) -> bool:
        try:
            with urllib.request.urlopen(self.url + "/health/liveliness", timeout=2) as r:
                return r.status == 200
        except (urllib.error.URLError, OSError, ValueError):
            return False

    def stop(self, timeout_s: float = 15) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            # The proxy's workers are in its process group (its own session, see start()).
            self._signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                self._signal_group(proc, signal.SIGKILL)
                proc.wait(timeout=5)
        self._close_log()

    @staticmethod
    def _signal_group(proc: subprocess.Popen, sig) -> None:
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            try:
                proc.send_signal(sig)
            except ProcessLookupError:
                pass

    def restart(self, on_wait: Optional[Callable[[float], None]] = None) -> "Proxy":
        self.stop()
        return self.start(on_wait=on_wait)

    def _close_log(self):
        if self._log is not None:
            self._log.close()
            self._log = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()

    def __repr__(self):
        return f"Proxy({self.url}, pid={self.pid})"


def start_proxy(config: Mapping[str, Any], workdir, env: Optional[Mapping[str, str]] = None, num_workers: int = 1,
                timeout_s: float = 90, *, port: Optional[int] = None, master_key: Optional[str] = None,
                on_wait: Optional[Callable[[float], None]] = None) -> Proxy:
    """Write `config` as the proxy's YAML in `workdir`, start the proxy and wait until it serves."""
    return Proxy(config, workdir, env=env, num_workers=num_workers, timeout_s=timeout_s, port=port,
                 master_key=master_key).start(on_wait=on_wait)
