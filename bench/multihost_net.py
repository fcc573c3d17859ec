"""Several hosts on one machine for the multi-host harness: Linux network namespaces joined by veth links
to a bridge, links cut and healed with iptables, and a user-space TCP proxy that delays a host's
traffic (the kernel here has no ``netem``).

Every namespace the harness makes is named ``pmh-<pid>-<run>-<host>``: unique per run, so parallel or
aborted runs never collide, and those of a run whose process is gone are removed by the next run
(``remove_stale``). Addresses exist only inside these namespaces (``10.77.0.0/24`` by default); the
machine's own namespace gets none. Needs root and ``ip`` (iproute2) and ``iptables``.

A thread of this process can work inside a namespace (``inside``): the sockets it opens there belong
to that namespace, so the harness's HTTP clients and its in-process LLM server are hosts of their own.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import queue
import random
import shutil
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

NETNS_DIR = Path("/var/run/netns")
PREFIX = "pmh-"
CLONE_NEWNET = 0x40000000
_libc = ctypes.CDLL(None, use_errno=True)


def available() -> str | None:
    """Why the harness cannot run here (not root, no ``ip``/``iptables``, namespaces refused), or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces and iptables)"
    for tool in ("ip", "iptables"):
        if shutil.which(tool) is None:
            return f"{tool} not installed"
    name = f"{PREFIX}{os.getpid()}-probe"
    try:
        sh("ip", "netns", "add", name)
        sh("ip", "netns", "exec", name, "iptables", "-L", "-n")
    except (subprocess.CalledProcessError, OSError) as exc:
        return f"network namespaces unavailable: {exc}"
    finally:
        subprocess.run(["ip", "netns", "del", name], capture_output=True, check=False)
    return None


def sh(*args: str) -> str:
    """Run a command, raising with its stderr when it fails; its stdout."""
    done = subprocess.run(list(args), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise subprocess.CalledProcessError(done.returncode, args, done.stdout, done.stderr)
    return done.stdout


def remove_stale() -> list[str]:
    """Delete the namespaces of harness runs whose process has exited (a killed run's leftovers), and
    end the processes that run still had in them (its Redis, gateway, workers)."""
    removed = []
    for path in NETNS_DIR.glob(f"{PREFIX}*") if NETNS_DIR.exists() else []:
        pid = path.name[len(PREFIX) :].split("-")[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            left = subprocess.run(
                ["ip", "netns", "pids", path.name], capture_output=True, text=True, check=False
            )
            for orphan in left.stdout.split():
                with contextlib.suppress(OSError, ValueError):
                    os.kill(int(orphan), signal.SIGKILL)
            subprocess.run(["ip", "netns", "del", path.name], capture_output=True, check=False)
            removed.append(path.name)
    return removed


@contextlib.contextmanager
def inside(netns: str) -> Iterator[None]:
    """Run this thread inside namespace ``netns`` (sockets it opens live there, threads it starts stay
    there), and return it to where it was after. Other threads are not moved."""
    here = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(NETNS_DIR / netns, os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {netns} failed")
        try:
            yield
        finally:
            _libc.setns(here, CLONE_NEWNET)
    finally:
        os.close(here)
        os.close(target)


def enter(netns: str) -> None:
    """Move this thread into ``netns`` for good (the harness's main thread: its clients are a host)."""
    target = os.open(NETNS_DIR / netns, os.O_RDONLY)
    try:
        if _libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {netns} failed")
    finally:
        os.close(target)


@dataclass
class Network:
    """Hosts (one namespace each) on one /24, each joined by a veth pair to a bridge in a switch
    namespace of its own. ``hosts`` maps a host's name to the last byte of its address."""

    hosts: dict[str, int]
    subnet: str = "10.77.0"
    run: str = field(default_factory=lambda: f"{os.getpid()}-{random.randrange(16**4):04x}")
    made: list[str] = field(default_factory=list)

    def ns(self, host: str) -> str:
        return f"{PREFIX}{self.run}-{host}"

    def ip(self, host: str) -> str:
        return f"{self.subnet}.{self.hosts[host]}"

    def exec_args(self, host: str) -> list[str]:
        """The prefix that runs a command on ``host``: ``ip netns exec <its namespace>``."""
        return ["ip", "netns", "exec", self.ns(host)]

    def run_on(self, host: str, *args: str) -> str:
        return sh(*self.exec_args(host), *args)

    def create(self) -> Network:
        """The switch and every host, linked and addressed; on a failure half-way, what was made is
        removed before the error propagates."""
        try:
            switch = self.ns("switch")
            sh("ip", "netns", "add", switch)
            self.made.append(switch)
            sh("ip", "-n", switch, "link", "add", "br0", "type", "bridge")
            sh("ip", "-n", switch, "link", "set", "br0", "up")
            for host, last in self.hosts.items():
                name = self.ns(host)
                sh("ip", "netns", "add", name)
                self.made.append(name)
                port = f"v{last}"
                sh("ip", "-n", switch, "link", "add", port, "type", "veth", "peer", "name", "eth0",
                   "netns", name)  # fmt: skip
                sh("ip", "-n", switch, "link", "set", port, "master", "br0", "up")
                sh("ip", "-n", name, "addr", "add", f"{self.ip(host)}/24", "dev", "eth0")
                sh("ip", "-n", name, "link", "set", "eth0", "up")
                sh("ip", "-n", name, "link", "set", "lo", "up")
        except BaseException:
            self.destroy()
            raise
        return self

    def destroy(self) -> None:
        """Every namespace this network made (their veths go with them); safe to call twice."""
        while self.made:
            subprocess.run(["ip", "netns", "del", self.made.pop()], capture_output=True, check=False)

    # -- faults ------------------------------------------------------------------------------------
    def cut(self, host: str, peer: str) -> None:
        """Blackhole every packet between ``host`` and ``peer`` (both ways, dropped on ``host``): a
        partition, where connections hang rather than being refused."""
        ip = self.ip(peer)
        self.run_on(host, "iptables", "-I", "OUTPUT", "-d", ip, "-j", "DROP")
        self.run_on(host, "iptables", "-I", "INPUT", "-s", ip, "-j", "DROP")

    def heal(self, host: str, peer: str) -> None:
        ip = self.ip(peer)
        self.run_on(host, "iptables", "-D", "OUTPUT", "-d", ip, "-j", "DROP")
        self.run_on(host, "iptables", "-D", "INPUT", "-s", ip, "-j", "DROP")

    def lossy(self, host: str, peer: str, probability: float, on: bool = True) -> None:
        """Drop each packet between ``host`` and ``peer`` with ``probability`` (both ways), or stop."""
        ip, op = self.ip(peer), "-I" if on else "-D"
        stat = ["-m", "statistic", "--mode", "random", "--probability", f"{probability:.3f}", "-j", "DROP"]
        self.run_on(host, "iptables", op, "OUTPUT", "-d", ip, *stat)
        self.run_on(host, "iptables", op, "INPUT", "-s", ip, *stat)

    def redirect(self, host: str, peer: str, port: int, via: str) -> None:
        """``host``'s connections to ``peer:port`` go to ``via:port`` instead (DNAT), where a proxy
        forwards them: the host is configured with the real address and never sees the proxy."""
        to = f"{self.ip(via)}:{port}"
        rule = ["-p", "tcp", "-d", self.ip(peer), "--dport", str(port), "-j", "DNAT", "--to-destination", to]
        self.run_on(host, "iptables", "-t", "nat", "-A", "OUTPUT", *rule)


class DelayProxy:
    """A TCP proxy in a namespace of its own, listening on its host's address at ``port`` and
    forwarding to ``upstream``: each chunk is held ``delay_s`` (changeable at any time) in each
    direction, without limiting throughput (a queue per direction, the chunks kept in order)."""

    def __init__(self, netns: str, listen: tuple[str, int], upstream: tuple[str, int]) -> None:
        self.netns = netns
        self.listen = listen
        self.upstream = upstream
        self.delay_s = 0.0
        self.connections = 0
        self._stop = threading.Event()
        self._sock: socket.socket | None = None
        self._open: set[socket.socket] = set()
        self._lock = threading.Lock()

    def start(self) -> DelayProxy:
        with inside(self.netns):
            sock = socket.socket()
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind(self.listen)
            sock.listen(256)
            sock.settimeout(0.5)
            self._sock = sock
            # Started while inside: the accept thread (and the pumps it starts) connect upstream from
            # the proxy's namespace.
            threading.Thread(target=self._accept, name=f"proxy-{self.listen[1]}", daemon=True).start()
        return self

    def _accept(self) -> None:
        assert self._sock is not None
        while not self._stop.is_set():
            try:
                client, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            try:
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            client.settimeout(None)
            with self._lock:
                self.connections += 1
                self._open.update((client, server))
            for src, dst in ((client, server), (server, client)):
                chunks: queue.Queue[tuple[float, bytes]] = queue.Queue()
                threading.Thread(target=self._read, args=(src, dst, chunks), daemon=True).start()
                threading.Thread(target=self._write, args=(src, dst, chunks), daemon=True).start()

    def _read(self, src: socket.socket, dst: socket.socket, chunks: queue.Queue[tuple[float, bytes]]) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            chunks.put((time.monotonic() + self.delay_s, data))
            if not data:
                return

    def _write(
        self, src: socket.socket, dst: socket.socket, chunks: queue.Queue[tuple[float, bytes]]
    ) -> None:
        while True:
            due, data = chunks.get()
            wait = due - time.monotonic()
            if wait > 0:
                time.sleep(wait)
            if not data:  # the other side closed: pass the close on, both ways
                self._close(src, dst)
                return
            try:
                dst.sendall(data)
            except OSError:
                self._close(src, dst)
                return

    def _close(self, *socks: socket.socket) -> None:
        for s in socks:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
            with self._lock:
                self._open.discard(s)

    def stop(self) -> None:
        self._stop.set()
        if self._sock is not None:
            self._sock.close()
        with self._lock:
            left = list(self._open)
        self._close(*left)
