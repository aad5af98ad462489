"""The components as processes: starting them with their PIDs recorded in state.json,
telling whether a recorded PID is still the component, and stopping them by PID."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from crossdock.dev.k8s.build import ADDONS, BINARIES, COMPONENTS, bin_dir
from crossdock.dev.k8s.errors import ControlPlaneError
from crossdock.dev.k8s.state import write_state
from crossdock.dev.proc import log_tail, proc_stat, spawn, start_time, terminate

# Components started by this process. They outlive it by design (down() stops them by
# PID from any process); the Popen objects are kept so that Python reaps them quietly.
_CHILDREN: dict[int, subprocess.Popen[bytes]] = {}


def reap(pid: int) -> None:
    child = _CHILDREN.get(pid)
    if child is not None:
        if child.poll() is not None:
            del _CHILDREN[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def pid_alive(pid: int, exe: str, start: str | None = None) -> bool:
    """True when ``pid`` is a live (not zombie) process executing ``exe`` (and started at
    ``start``, when given, so that a reused PID is not mistaken for the component)."""
    if not Path("/proc").is_dir():
        try:
            os.kill(pid, 0)
        except OSError:
            return False
        return True
    fields = proc_stat(pid)
    if fields is None:
        return False
    if fields[0] == "Z":
        reap(pid)
        return False
    if start is not None and fields[19] != start:
        return False
    try:
        # /proc/<pid>/exe is set when exec commits; cmdline can be briefly empty after it.
        path = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return False
    return path.removesuffix(" (deleted)") == exe


def stop_pid(pid: int, exe: str, start: str | None = None, timeout: float = 15.0,
             sig: int = signal.SIGTERM) -> None:
    """Send ``sig``; SIGKILL after ``timeout`` seconds; return once the process is gone."""
    start = start if start is not None else start_time(pid)
    if not pid_alive(pid, exe, start):
        return

    def gone() -> bool:
        # Not pid_alive: while a large process unmaps its memory on the way out, /proc/<pid>/exe no
        # longer reads but the process (its working directory, its files) is still there.
        reap(pid)
        if not Path("/proc").is_dir():
            return not pid_alive(pid, exe, start)
        fields = proc_stat(pid)
        return fields is None or fields[0] == "Z" or fields[19] != start

    terminate(pid, gone, timeout=timeout, sig=sig, kill_wait=5.0)


def stop_processes(data: dict[str, Any]) -> None:
    """Stop the add-ons and components recorded in ``data`` (state.json), in reverse start order."""
    for name in reversed(ADDONS):
        info = data.get("addons", {}).pop(name, None)
        if info:
            stop_pid(int(info["pid"]), str(info["exe"]), info.get("start"))
    for name in reversed(COMPONENTS):
        info = data.get("processes", {}).get(name)
        if info:
            stop_pid(int(info["pid"]), str(info["exe"]), info.get("start"))


def unrecorded(state: Path) -> list[tuple[int, str]]:
    """Components running in ``state`` (their working directory) whose PIDs were not recorded,
    e.g. after state.json was lost; found by exact binary path and working directory."""
    proc = Path("/proc")
    if not proc.is_dir():
        return []
    exes = {str(bin_dir() / name) for name in BINARIES}
    where = str(state.resolve())
    found = []
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            exe = os.readlink(entry / "exe").removesuffix(" (deleted)")
            cwd = os.readlink(entry / "cwd")
        except OSError:
            continue
        if exe in exes and cwd in (where, f"{where} (deleted)"):
            found.append((int(entry.name), exe))
    return found


class Launcher:
    """Starts components, recording each PID in state.json as soon as it exists."""

    def __init__(self, state: Path, data: dict[str, Any],
                 extra_args: Mapping[str, Sequence[str]] | None = None) -> None:
        self.state = state
        self.data = data
        self.extra_args = extra_args or {}
        self.logs = state / "log"
        self.logs.mkdir(exist_ok=True)

    def start(self, name: str, args: Sequence[str], *, append: bool = False, env: Mapping[str, str] | None = None,
              section: str = "processes") -> None:
        """Start ``name`` and record it in state.json under ``section`` (``addons``: beside the plane)."""
        exe = str(bin_dir() / name)
        args = [*args, *self.extra_args.get(name, ())]
        log_path = self.logs / f"{name}.log"
        proc = spawn([exe, *args], log_path, env=env, cwd=self.state, append=append)
        _CHILDREN[proc.pid] = proc
        self.data.setdefault(section, {})[name] = {"pid": proc.pid, "exe": exe, "log": str(log_path),
                                                   "args": list(args), "start": start_time(proc.pid)}
        write_state(self.state, self.data)

    def check_alive(self, name: str, section: str = "processes") -> None:
        info = self.data[section][name]
        if not pid_alive(info["pid"], info["exe"], info.get("start")):
            raise ControlPlaneError(f"{name} exited during start-up; last log lines:\n"
                                    f"{log_tail(Path(info['log']), 30)}")
