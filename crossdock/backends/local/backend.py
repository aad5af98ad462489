"""The local backend: this machine as one node, jobs as supervised subprocesses."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path
from types import MappingProxyType
from typing import Sequence

from crossdock.backends.local import CAPABILITIES
from crossdock.queue.ports import BackendStatus, BackendStore, Eviction, Inventory
from crossdock.backends.local import gpus as gpu_discovery
from crossdock.backends.redis_store.embedded import private_dir
from crossdock.backends.local import resources, spawner, workspace
from crossdock.backends.local.record import record
from crossdock.queue.config import ClusterConfig
from crossdock.queue.models import Job
from crossdock.queue.cpu_share import cpu_milli
from crossdock.queue.serving import ServiceSpec
from crossdock.queue.snapshot import GpuDevice, Node
from crossdock.queue.states import JobState


def local_nodes(cfg: ClusterConfig, discovered: Sequence[gpu_discovery.DiscoveredGpu] | None) -> tuple[Node, ...]:
    """Nodes of every local pool. Discovered GPUs replace the declared ones on the first node of
    the first local pool, this machine (the nodes declared after it, in that pool or another, keep
    their declared GPUs: they are not the same devices again); ``cpus: auto`` / ``memory_mib:
    auto`` are this machine's (:mod:`.resources`), a number is kept as declared (so a config that
    declares its node schedules the same on every machine)."""
    nodes: list[Node] = []
    for pool_name, pool in cfg.pools.items():
        if pool.backend != "local":
            continue
        decls = pool.nodes or []
        for d in decls:
            if discovered is not None and not nodes:  # the first node: this machine
                devices = tuple(GpuDevice(f"{d.name}:{g.index}", g.index, gpu_discovery.short_model(g.name),
                                          g.memory_mib) for g in discovered)
            else:
                devices = tuple(GpuDevice(f"{d.name}:{k}", k, d.gpu_model or pool.gpu.model or "GPU")
                                for k in range(d.gpus))
            cpu_milli = resources.cpu_milli() if d.cpus == "auto" else d.cpus * 1000
            mem = resources.memory_mib() if d.memory_mib == "auto" else d.memory_mib
            nodes.append(Node(d.name, pool_name, "local", cpu_milli, mem, devices,
                              MappingProxyType(dict(d.labels)), gpu_sharing=pool.gpu.sharing))
        if not decls:
            devices = tuple(GpuDevice(f"localhost:{g.index}", g.index, gpu_discovery.short_model(g.name), g.memory_mib)
                            for g in (discovered or [] if not nodes else []))
            nodes.append(Node("localhost", pool_name, "local", resources.cpu_milli(), resources.memory_mib(), devices))
    return tuple(nodes)


class LocalBackend:
    kind = "local"
    capabilities = CAPABILITIES

    def __init__(self, store: BackendStore, cfg: ClusterConfig, state_dir: Path, env: dict[str, str]):
        self.store, self.cfg, self.state_dir, self.env = store, cfg, state_dir, env

    def inventory(self) -> Inventory:
        return Inventory(local_nodes(self.cfg, gpu_discovery.discovered() or None))

    def submit(self, job: Job, fresh: bool = False) -> str:
        """Start a detached supervisor for this attempt. The caller has claimed the dispatch, so
        a redelivered task never gets here twice for one attempt. The supervisor holds the job to
        its CPU request and limit (:mod:`.cpulimit`), as a pod's are."""
        logdir = private_dir(self.state_dir / "log")
        request, limit = cpu_milli(job, self.cfg)
        args = [str(job.id), str(job.attempts), str(self.cfg.scheduler.kill_wait_seconds), f"--cpu={request}:{limit}"]
        cpuset = self._cpuset(job.nodes[0] if job.nodes else None)
        if cpuset:
            args.append(f"--cpuset={cpuset}")
        log_path = logdir / f"supervisor-{job.id}.log"
        if spawner.spawn(self.state_dir, args, self.env, log_path):  # forked, imports already done
            return f"local:{socket.gethostname()}"
        with open(os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600), "ab") as log:
            proc = subprocess.Popen([sys.executable, "-m", "crossdock.backends.local.supervisor", *args, "--daemonize"],
                                    env=self.env, stdin=subprocess.DEVNULL, stdout=log, stderr=log, close_fds=True)
            proc.wait()  # the daemonizing parent exits at once
        return f"local:{socket.gethostname()}"

    def _cpuset(self, node: str | None) -> str | None:
        """The CPUs the config pins node ``node``'s jobs to (its ``cpuset``), if any."""
        for pool in self.cfg.pools.values():
            if pool.backend == self.kind:
                for d in pool.nodes or ():
                    if d.name == node:
                        return d.cpuset
        return None

    def cancel(self, job: Job) -> None:
        """The supervisor sees the cancel request within a heartbeat and stops the job."""

    def preempt(self, job: Job, grace_seconds: int) -> None:
        self.store.request_preempt(job.id, grace_seconds)

    def evict(self, job: Job, grace_seconds: int) -> Eviction:
        """A requeue: the supervisor sees the stop request within a heartbeat, signals the job and
        stops it after ``grace_seconds``; the follower puts it back in the queue (its ``requeue``
        policy holds). No budgets of its own: the config's ``descheduler.budgets`` apply."""
        moved = self.store.request_preempt(job.id, grace_seconds)
        return Eviction.EVICTED if moved else Eviction.GONE

    def status(self, jobs: Sequence[Job]) -> dict[int, BackendStatus]:
        alive = self.store.alive([j.id for j in jobs])
        return {j.id: BackendStatus(j.backend_ref or "", JobState.RUNNING) for j in jobs if alive.get(j.id)}

    # --- RunsServices: the router (crossdock.workers.router) is the service's address --------------
    def ensure_service(self, spec: ServiceSpec) -> None:
        """Nothing to create: the router opens a listener for every service with a local pool (and
        records its address)."""

    def delete_service(self, name: str) -> None:
        """Nothing to remove: the router closes the listener once the record is gone."""

    def drain_replica(self, job: Job) -> None:
        """Out of the router's rotation: it sends the replica nothing new and reports it drained
        once its last request is answered; the controller then cancels the job."""
        self.store.services.set_draining(job.id)

    def kill_orphan(self, job: Job) -> None:
        """Stop what is left of a job whose supervisor died (its process group; the pid from the
        workspace when RUNNING never reached the store)."""
        pgid = job.pid or workspace.job_pid(self._workspace(job))
        if pgid:
            try:
                os.killpg(pgid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass

    def _workspace(self, job: Job) -> Path:
        return workspace.path(self.state_dir, job.id, job.attempts)

    def watcher_alive(self, job: Job) -> bool:
        return workspace.watcher_alive(self._workspace(job))

    def settle(self, job: Job) -> JobState | None:
        """Record the end a dead supervisor wrote in the job's workspace but could not store."""
        ws = self._workspace(job)
        outcome = workspace.read_outcome(ws)
        if outcome is None:
            return None
        result = workspace.result(ws) if job.spec.python is not None else None
        record(self.store, job.id, job.attempts, outcome, result, job.spec.requeue, self.state_dir, actor="reconcile")
        return outcome.state
