"""Real `redis-server` processes for the tests: on free loopback ports, in temporary directories,
killable and restartable, with or without AOF persistence, plain, with an ACL user, or as a
three-node Cluster, or over TLS (rediss://, a certificate made on the spot). Never the machine's 6379, never fakeredis.

    from redis_server import RedisServer, redis_cluster

    srv = RedisServer(tmp_path, aof=True).start()
    os.environ["AISIA_REDIS_URL"] = srv.url
    srv.kill(); srv.start()          # same port, same directory: AOF replayed
    srv.kill(); srv.wipe(); srv.start()   # came back empty
    srv.stop()

Pytest fixtures built on it: ``redis_server`` (one per test, AOF on) and ``redis_module`` (one per
module); import them into a test module (``from redis_server import redis_server``).

When the binary is missing the fixture fails with a message saying so (``.ci/run`` installs
it); it never skips."""

from __future__ import annotations

import datetime
import ipaddress
import os
import shutil
import signal
import socket
import ssl
import subprocess
import time
from pathlib import Path
from typing import Optional

import pytest

from aisia_plugin.demo.proxy import free_port as proxy_free_port

BINARY = os.environ.get("AISIA_TEST_REDIS_SERVER", "redis-server")


class RedisServerError(RuntimeError):
    pass


def redis_binary() -> str:
    path = shutil.which(BINARY)
    if path is None:
        raise RedisServerError(
            f"the tests need a real Redis server, but {BINARY!r} is not on PATH: install it "
            "(apt-get install redis-server; .ci/run does this) or point AISIA_TEST_REDIS_SERVER at one")
    return path


def free_port(cluster: bool = False) -> int:
    """A free loopback port, never one handed out before in this process (``demo.proxy.free_port``,
    the one home of that rule); for a Cluster node, its bus port +10000 is free too."""
    for _ in range(100):
        port = proxy_free_port()
        if port + 10000 > 65535 and cluster:
            continue
        if not cluster:
            return port
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port
    raise RedisServerError("no free port found")


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made here (no network, no openssl binary)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "127.0.0.1")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (x509.CertificateBuilder().subject_name(name).issuer_name(name).public_key(key.public_key())
            .serial_number(x509.random_serial_number()).not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + datetime.timedelta(days=1))
            .add_extension(x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), False)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
            .sign(key, hashes.SHA256()))
    cert_path, key_path = directory / "cert.pem", directory / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL,
                                           serialization.NoEncryption()))
    return cert_path, key_path


class RedisServer:
    """One redis-server process. ``aof``: appendonly with fsync on every write (a kill loses
    nothing); without it nothing persists (a restart comes back empty). ``user``/``password``:
    an ACL user (and the default user disabled)."""

    def __init__(self, directory, *, aof: bool = False, port: Optional[int] = None, cluster: bool = False,
                 user: Optional[str] = None, password: Optional[str] = None, tls: bool = False, extra: tuple = ()):
        self.dir = Path(directory)
        self.dir.mkdir(parents=True, exist_ok=True)
        self.aof, self.cluster, self.tls = aof, cluster, tls
        if tls:
            self.cert, self.key = self_signed_certificate(self.dir)
        self.port = port or free_port(cluster)
        # A port this helper picked may be taken between its check and redis-server's bind (another
        # test's process, a cluster node's bus port): the first start then moves to another one.
        self._may_move = port is None
        self.user, self.password = user, password
        self.extra = tuple(extra)
        self.proc: Optional[subprocess.Popen] = None

    @property
    def url(self) -> str:
        auth = f"{self.user}:{self.password}@" if self.user else ""
        if self.tls:  # the server's own certificate is the client's trust anchor
            return f"rediss://{auth}127.0.0.1:{self.port}/0?ssl_ca_certs={self.cert}"
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def args(self) -> list[str]:
        a = [redis_binary()]
        if self.user:  # a config file: ACL rules are several words, which the command line splits
            conf = self.dir / "acl.conf"
            conf.write_text(f"user {self.user} on >{self.password} ~* &* +@all\nuser default off\n")
            a.append(str(conf))
        if self.tls:
            a += ["--port", "0", "--tls-port", str(self.port), "--tls-cert-file", str(self.cert),
                  "--tls-key-file", str(self.key), "--tls-ca-cert-file", str(self.cert), "--tls-auth-clients", "no"]
        else:
            a += ["--port", str(self.port)]
        a += ["--bind", "127.0.0.1", "--dir", str(self.dir),
             "--save", "", "--daemonize", "no", "--logfile", str(self.dir / "redis.log"),
             "--protected-mode", "no"]
        if self.aof:
            a += ["--appendonly", "yes", "--appendfsync", "always"]
        else:
            a += ["--appendonly", "no"]
        if self.cluster:
            a += ["--cluster-enabled", "yes", "--cluster-config-file", str(self.dir / "nodes.conf"),
                  "--cluster-node-timeout", "2000"]
        return a + list(self.extra)

    def start(self, timeout: float = 10.0) -> "RedisServer":
        if self.proc is not None and self.proc.poll() is None:
            return self
        moves = 0
        while True:
            try:
                return self._start_once(timeout)
            except RedisServerError as e:
                if not (self._may_move and "Address already in use" in str(e)) or moves == 4:
                    raise
            moves += 1
            self.port = free_port(self.cluster)
            (self.dir / "nodes.conf").unlink(missing_ok=True)  # a node that never ran: nothing to keep

    def _start_once(self, timeout: float) -> "RedisServer":
        self.proc = subprocess.Popen(self.args(), stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                err = self.proc.stderr.read().decode(errors="replace")
                log = (self.dir / "redis.log").read_text(errors="replace")[-2000:] if (self.dir / "redis.log").exists() else ""
                raise RedisServerError(f"redis-server on port {self.port} exited: {err} {log}")
            if self.ping():
                self._may_move = False  # it ran on this port: a restart keeps it
                return self
            time.sleep(0.02)
        self.kill()
        raise RedisServerError(f"redis-server on port {self.port} did not answer within {timeout} s")

    def ping(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.5) as raw:
                s = ssl.create_default_context(cafile=str(self.cert)).wrap_socket(raw, server_hostname="127.0.0.1") \
                    if self.tls else raw
                if self.user:
                    s.sendall(f"AUTH {self.user} {self.password}\r\n".encode())
                    s.recv(64)
                s.sendall(b"PING\r\n")
                reply = s.recv(64)
                return reply.startswith(b"+PONG") or (self.cluster and reply.startswith(b"+"))
        except OSError:
            return False

    def kill(self) -> None:
        """SIGKILL: no shutdown save, the way a crash or an OOM kill ends it."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(10)
        self.proc = None

    def stop(self) -> None:
        self.kill()

    def pause(self) -> None:
        """SIGSTOP: the server holds its connections and answers nothing (a hung or overloaded Redis)."""
        self.proc.send_signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.proc.send_signal(signal.SIGCONT)

    def restart(self, *, wipe: bool = False) -> "RedisServer":
        self.kill()
        if wipe:
            self.wipe()
        return self.start()

    def wipe(self) -> None:
        """Remove what was persisted (the next start comes back empty)."""
        for p in self.dir.iterdir():
            if p.name not in ("redis.log", "nodes.conf", "acl.conf", "cert.pem", "key.pem"):
                if p.is_dir():
                    shutil.rmtree(p)
                else:
                    p.unlink()

    def client(self):
        """A synchronous redis-py client, to inspect what the store wrote."""
        import redis

        return redis.Redis.from_url(self.url)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()


class RedisCluster:
    """Three master nodes (no replicas) with ``--cluster-enabled yes`` on free ports, joined by
    ``redis-cli --cluster create``."""

    def __init__(self, directory, n: int = 3):
        self.nodes = [RedisServer(Path(directory) / f"node{i}", cluster=True) for i in range(n)]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.nodes[0].port}/0"

    def start(self) -> "RedisCluster":
        for node in self.nodes:
            node.start()
        cli = shutil.which("redis-cli")
        if cli is None:
            raise RedisServerError("redis-cli is needed to form the test cluster (it ships with redis-server)")
        out = subprocess.run([cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
                              "--cluster-replicas", "0", "--cluster-yes"], capture_output=True, text=True, timeout=60)
        if out.returncode != 0:
            raise RedisServerError(f"redis-cli --cluster create failed: {out.stdout} {out.stderr}")
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline:
            info = subprocess.run([cli, "-p", str(self.nodes[0].port), "cluster", "info"], capture_output=True,
                                  text=True, timeout=10).stdout
            if "cluster_state:ok" in info:
                return self
            time.sleep(0.1)
        raise RedisServerError("the test cluster did not reach cluster_state:ok")

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()


@pytest.fixture
def redis_server(tmp_path):
    srv = RedisServer(tmp_path / "redis", aof=True).start()
    yield srv
    srv.stop()


@pytest.fixture(scope="module")
def redis_module(tmp_path_factory):
    srv = RedisServer(tmp_path_factory.mktemp("redis"), aof=True).start()
    yield srv
    srv.stop()
