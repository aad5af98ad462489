"""What the local Slurm cluster is made of (nodes, partitions) and where each of its files,
sockets and ports lives."""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

from crossdock.backends.slurm.envfile import ENV_FILE_NAME, local_cluster_dir

RESTD_USER = "slurm"


@dataclass(frozen=True)
class NodeSpec:
    name: str
    cpus: int
    memory_mib: int
    gpu_type: str | None = None
    gpus: int = 0


@dataclass(frozen=True)
class PartitionSpec:
    name: str
    nodes: str
    priority_tier: int
    default: bool = False
    preempt_mode: str | None = None


NODES: tuple[NodeSpec, ...] = (
    NodeSpec("cpu1", 8, 16000),
    NodeSpec("cpu2", 8, 16000),
    NodeSpec("gpu-a100-1", 16, 64000, "a100", 8),
    NodeSpec("gpu-l4-1", 8, 32000, "l4", 4),
)
"""The nodes that are always on: ``up`` starts their slurmd and waits for them."""
ELASTIC_NODES: tuple[NodeSpec, ...] = (
    NodeSpec("elastic1", 4, 8000),
    NodeSpec("elastic2", 4, 8000),
    NodeSpec("elastic3", 4, 8000),
)
"""Power-saved nodes (``State=CLOUD``): they start powered down; Slurm's ResumeProgram starts
their slurmd when a job or ``scontrol update … state=power_up`` needs them, its SuspendProgram
stops it after ``SuspendTime`` idle."""
ALWAYS_ON = "cpu[1-2],gpu-a100-1,gpu-l4-1"
PARTITIONS: tuple[PartitionSpec, ...] = (
    PartitionSpec("cpu", "cpu[1-2]", 1, default=True),
    PartitionSpec("gpu-a100", "gpu-a100-1", 1),
    PartitionSpec("gpu-l4", "gpu-l4-1", 1),
    # The always-on nodes only: a partition holding an elastic node could not be kept awake.
    PartitionSpec("high", ALWAYS_ON, 10, preempt_mode="OFF"),
    PartitionSpec("elastic", "elastic[1-3]", 1),
)
ELASTIC_PARTITION = "elastic"


class ClusterError(RuntimeError):
    """The local cluster could not be installed, started or reached."""


def default_dir() -> Path:
    return local_cluster_dir()


def default_port_base() -> int:
    return int(os.environ.get("CROSSDOCK_SLURM_PORT_BASE", "16817"))


@dataclass(frozen=True)
class Layout:
    """Every path and port of one cluster, derived from its directory.

    Sockets live in a short runtime directory under /run: a unix socket path is limited to
    108 bytes, and slurmrestd, which runs as user slurm, must reach both sockets even when the
    state directory sits under a private home.
    """

    root: Path
    port_base: int

    @classmethod
    def of(cls, state_dir: str | os.PathLike[str] | None = None, port_base: int | None = None) -> Layout:
        root = Path(state_dir).expanduser().resolve() if state_dir else default_dir().resolve()
        return cls(root, default_port_base() if port_base is None else port_base)

    @property
    def runtime(self) -> Path:
        digest = hashlib.sha1(str(self.root).encode()).hexdigest()[:10]
        return Path("/run/crossdock-slurm") / digest

    etc = property(lambda self: self.root / "etc")
    conf = property(lambda self: self.etc / "slurm.conf")
    gres_conf = property(lambda self: self.etc / "gres.conf")
    jwt_key = property(lambda self: self.etc / "jwt_hs256.key")
    state = property(lambda self: self.root / "state")
    # Jobs of other users (slurmrestd's local auth runs them as slurm) exec their script
    # from the spool directory, so it cannot sit under a private home either.
    spool = property(lambda self: self.runtime / "spool")
    logs = property(lambda self: self.root / "log")
    pids = property(lambda self: self.root / "run")
    devices = property(lambda self: self.root / "dev")
    env_file = property(lambda self: self.root / ENV_FILE_NAME)
    munge_dir = property(lambda self: self.runtime / "munge")
    munge_socket = property(lambda self: self.munge_dir / "munge.socket")
    munge_key = property(lambda self: self.root / "munge" / "munge.key")
    restd_dir = property(lambda self: self.runtime / "restd")
    restd_etc = property(lambda self: self.runtime / "etc")
    restd_socket = property(lambda self: self.restd_dir / "slurmrestd.sock")
    ctld_port = property(lambda self: self.port_base)
    slurmd_port = property(lambda self: self.port_base + 1)
    restd_port = property(lambda self: self.port_base + 3)

    def node_port(self, index: int) -> int:
        """The slurmd port of ``(*NODES, *ELASTIC_NODES)[index]``."""
        return self.port_base + 10 + index

    # Power saving: the programs slurmctld runs, and the file naming nodes whose resume is to
    # fail (tests write it; the ResumeProgram then leaves those nodes off).
    resume_program = property(lambda self: self.etc / "resume.sh")
    suspend_program = property(lambda self: self.etc / "suspend.sh")
    resume_fail_file = property(lambda self: self.etc / "resume-fail")
    power_log = property(lambda self: self.logs / "power.log")

    @property
    def restd_url(self) -> str:
        return f"http://127.0.0.1:{self.restd_port}"

    def pidfile(self, daemon: str) -> Path:
        return self.pids / f"{daemon}.pid"

    def daemons(self) -> list[tuple[str, str]]:
        """(name, binary) of every daemon, in start order."""
        return (
            [("munged", "munged"), ("slurmctld", "slurmctld")]
            + [(f"slurmd-{n.name}", "slurmd") for n in NODES]
            + [("slurmrestd-local", "slurmrestd"), ("slurmrestd-jwt", "slurmrestd")]
        )

    def client_env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "SLURM_JWT"}
        env["SLURM_CONF"] = str(self.conf)
        return env
