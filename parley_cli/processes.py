"""The child processes of ``parley up``: how one is described (``Component``) and launched (its own
process group, killed with its parent), and the ``Stack`` that starts them all, waits for each to be
ready, watches them and stops every one on a signal, so nothing is orphaned."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Protocol


class UpError(Exception):
    """A reason ``parley up`` cannot start (printed as one line, exit status 2)."""


@dataclass
class Component:
    """One child process: how to start it, where it listens and logs, and when it is ready."""

    name: str
    argv: list[str]
    url: str
    log: Path
    ready: Callable[[], bool]
    env: dict[str, str] = field(default_factory=dict)
    note: str = ""


class Launcher(Protocol):
    def __call__(self, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]: ...


def _die_with_parent() -> None:
    """In the child: its own process group (so a whole Celery pool can be signalled), and SIGTERM
    when ``parley up`` itself dies without cleaning up (Linux), so nothing is orphaned."""
    os.setsid()
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


def popen_launcher(argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen[bytes]:
    """Start a child with its output appended to ``log``, in its own process group, dying with us."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as fh:
        return subprocess.Popen(
            argv,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=fh,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,
        )


@dataclass
class Stack:
    """Starts components, waits for each readiness check, and stops all of them on a signal."""

    components: list[Component]
    _: KW_ONLY
    launcher: Launcher = popen_launcher
    echo: Callable[[str], None] = print
    grace_s: float = 10.0
    ready_timeout_s: float = 600.0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict, init=False)
    stopping: threading.Event = field(default_factory=threading.Event, init=False)

    def start(self) -> None:
        """Launch every component, then poll their readiness (all at once: the slow ones overlap)."""
        for c in self.components:
            self.procs[c.name] = self.launcher(c.argv, c.env, c.log)
            self.echo(f"  {c.name:<10} starting: {c.url}  log {c.log}{c.note}")
        pending = list(self.components)
        deadline = time.monotonic() + self.ready_timeout_s
        while pending:
            if self.stopping.is_set():
                raise UpError("stopped before everything was ready")
            for c in list(pending):
                proc = self.procs[c.name]
                if proc.poll() is not None:
                    raise UpError(f"{c.name} exited with status {proc.returncode}:\n{tail(c.log)}")
                if c.ready():
                    self.echo(f"  {c.name:<10} ready")
                    pending.remove(c)
            if time.monotonic() > deadline:
                names = ", ".join(c.name for c in pending)
                raise UpError(f"not ready after {self.ready_timeout_s:.0f} s: {names} (see their logs)")
            self.stopping.wait(0.25)

    def watch(self) -> str | None:
        """Block until a signal asks to stop (None) or a child exits on its own (its name)."""
        while not self.stopping.wait(0.5):
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    return name
        return None

    def stop(self) -> None:
        """SIGTERM to every child's process group (newest first), SIGKILL after the grace period."""
        alive = [p for p in reversed(list(self.procs.values())) if p.poll() is None]
        for proc in alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + self.grace_s
        for proc in alive:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        # A group may outlive its leader (a Celery pool child): make sure none is left.
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)


def tail(log: Path, lines: int = 20) -> str:
    """The last ``lines`` of a child's log: shown when it exits, so the reason is on the terminal."""
    try:
        return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return "(no log)"
