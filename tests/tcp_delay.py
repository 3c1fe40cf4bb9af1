"""A loopback TCP proxy that slows or stalls what passes through it: a slow or hung Redis, for
the fault tests and the soak run.

    with DelayProxy(redis.port) as slow:        # listens on a free 127.0.0.1 port
        url = f"redis://127.0.0.1:{slow.port}/0"
        slow.set_delay(0.2)                      # every chunk, each way, waits 200 ms
        slow.stall()                             # nothing is forwarded (connections stay open)
        slow.resume()                            # forwarded again, the held bytes first
        slow.set_delay(0)

Bytes are never dropped or reordered: each direction of each connection has a reader thread,
which stamps every chunk with the time it is due (its arrival plus the delay), and a sender
thread, which writes it on then (while stalled, once resumed): pure latency, no bandwidth cap. A target that is
down makes the proxy close the client's connection at once (a refused Redis, seen through it)."""

from __future__ import annotations

import queue
import socket
import threading
import time
from typing import Optional


class DelayProxy:
    def __init__(self, target_port: int, target_host: str = "127.0.0.1", port: int = 0):
        self.target = (target_host, target_port)
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind(("127.0.0.1", port))
        self._listener.listen(128)
        self.port = self._listener.getsockname()[1]
        self._delay = 0.0
        self._flowing = threading.Event()
        self._flowing.set()
        self._closed = False
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self.connections = 0
        self._thread: Optional[threading.Thread] = None

    # -- control ---------------------------------------------------------------------------------
    def set_delay(self, seconds: float) -> None:
        self._delay = max(0.0, float(seconds))

    def stall(self) -> None:
        self._flowing.clear()

    def resume(self) -> None:
        self._flowing.set()

    def drop_connections(self) -> None:
        """Close every connection passing through now (new ones are still accepted)."""
        with self._lock:
            socks, self._sockets = self._sockets, []
        for s in socks:
            _close(s)

    # -- life cycle ------------------------------------------------------------------------------
    def start(self) -> "DelayProxy":
        self._thread = threading.Thread(target=self._accept, name=f"delay-proxy-{self.port}", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._closed = True
        self._flowing.set()
        _close(self._listener)
        self.drop_connections()
        if self._thread is not None:
            self._thread.join(timeout=5)

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # -- forwarding ------------------------------------------------------------------------------
    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                upstream = socket.create_connection(self.target, timeout=5)
            except OSError:
                _close(client)
                continue
            upstream.settimeout(None)
            for s in (client, upstream):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            with self._lock:
                self._sockets += [client, upstream]
                self.connections += 1
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        """Read from `src`; each chunk is due `delay` after it arrived (pure latency: chunks in
        flight do not wait behind each other), and a sender thread writes it to `dst` then."""
        due: "queue.Queue[tuple[float, bytes] | None]" = queue.Queue()
        threading.Thread(target=self._send_when_due, args=(due, src, dst), daemon=True).start()
        try:
            while True:
                data = src.recv(65536)
                if not data:
                    break
                due.put((time.monotonic() + self._delay, data))
        except OSError:
            pass
        finally:
            due.put(None)

    def _send_when_due(self, due, src: socket.socket, dst: socket.socket) -> None:
        try:
            while True:
                item = due.get()
                if item is None:
                    break
                at, data = item
                wait = at - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                while not self._flowing.wait(0.1):
                    if self._closed:
                        return
                dst.sendall(data)
        except OSError:
            pass
        finally:
            _close(src)
            _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    try:
        s.close()
    except OSError:
        pass
