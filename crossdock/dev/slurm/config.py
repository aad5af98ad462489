"""The cluster's configuration files (pure text from a ``Layout``) and the state directory
they are written into: keys, spool, fake GPU devices, the config copy slurmrestd reads."""

from __future__ import annotations

import os
import pwd
import shutil

from crossdock.dev.proc import write_private
from crossdock.dev.slurm.layout import NODES, PARTITIONS, RESTD_USER, Layout

# Deliberately short: slurm's credential lifetime is also the delay before a requeued job
# may start again (cred_expire + 1 s); values under 5 are ignored.
CRED_EXPIRE_S = 10


def render_slurm_conf(layout: Layout) -> str:
    d = layout
    lines = [
        "# Written by crossdock.dev.slurm; regenerated on every `up`.",
        "ClusterName=crossdock",
        "SlurmctldHost=localhost(127.0.0.1)",
        # Bind to the configured addresses (127.0.0.1), not to every interface.
        "CommunicationParameters=NoInAddrAny,NoCtldInAddrAny",
        "SlurmUser=root",
        "SlurmdUser=root",
        f"SlurmctldPort={d.ctld_port}",
        f"SlurmdPort={d.slurmd_port}",
        "AuthType=auth/munge",
        f"AuthInfo=socket={d.munge_socket},cred_expire={CRED_EXPIRE_S}",
        "CredType=cred/munge",
        "AuthAltTypes=auth/jwt",
        f"AuthAltParameters=jwt_key={d.jwt_key}",
        f"StateSaveLocation={d.state}",
        f"SlurmdSpoolDir={d.spool}/%n",
        f"SlurmctldPidFile={layout.pidfile('slurmctld')}",
        f"SlurmdPidFile={d.pids}/slurmd-%n.pid",
        f"SlurmctldLogFile={d.logs}/slurmctld.log",
        f"SlurmdLogFile={d.logs}/slurmd-%n.log",
        "ProctrackType=proctrack/linuxproc",
        "TaskPlugin=task/none",
        "MpiDefault=none",
        # Nodes advertise the configured CPUs and memory, not the machine's.
        "SlurmdParameters=config_overrides",
        "SelectType=select/cons_tres",
        "SelectTypeParameters=CR_Core_Memory",
        "DefMemPerCPU=100",
        "PriorityType=priority/multifactor",
        "PriorityWeightAge=1000",
        "PriorityWeightPartition=10000",
        "PreemptType=preempt/partition_prio",
        "PreemptMode=REQUEUE",
        "JobRequeue=1",
        # A requeued job waits for the periodic main scheduler, not backfill.
        "SchedulerParameters=sched_interval=2,sched_min_interval=100000,bf_interval=1",
        "KillWait=5",
        # Finished jobs stay listed 5 min: every follow query lists them all.
        "MinJobAge=300",
        "MailProg=/bin/true",
        "ReturnToService=2",
        "JobCompType=jobcomp/filetxt",
        f"JobCompLoc={d.logs}/jobcomp.txt",
        "JobAcctGatherType=jobacct_gather/linux",
        "AccountingStorageType=accounting_storage/none",
        "GresTypes=gpu",
    ]
    for index, node in enumerate(NODES):
        gres = f" Gres=gpu:{node.gpu_type}:{node.gpus}" if node.gpus else ""
        lines.append(
            f"NodeName={node.name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={d.node_port(index)}"
            f" CPUs={node.cpus} RealMemory={node.memory_mib}{gres} State=UNKNOWN"
        )
    for part in PARTITIONS:
        extra = " Default=YES" if part.default else ""
        extra += f" PreemptMode={part.preempt_mode}" if part.preempt_mode else ""
        lines.append(
            f"PartitionName={part.name} Nodes={part.nodes} PriorityTier={part.priority_tier}"
            f" MaxTime=INFINITE State=UP{extra}"
        )
    return "\n".join(lines) + "\n"


def render_gres_conf(layout: Layout) -> str:
    lines = ["AutoDetect=off"]
    for node in NODES:
        if node.gpus:
            files = f"{layout.devices}/{node.name}/nvidia[0-{node.gpus - 1}]"
            lines.append(f"NodeName={node.name} Name=gpu Type={node.gpu_type} File={files}")
    return "\n".join(lines) + "\n"


def make_gpu_devices(layout: Layout) -> None:
    """One character device per fake GPU (NVIDIA's major number, no driver behind it).

    slurmd drops a GPU without ``File=``; where mknod is refused, a symlink to /dev/null
    also stats as a character device.
    """
    for node in NODES:
        node_dir = layout.devices / node.name
        node_dir.mkdir(parents=True, exist_ok=True)
        for minor in range(node.gpus):
            path = node_dir / f"nvidia{minor}"
            if path.exists() or path.is_symlink():
                continue
            try:
                os.mknod(path, 0o666 | 0o020000, os.makedev(195, minor))
            except OSError:
                path.symlink_to("/dev/null")


def prepare(layout: Layout, fresh_state: bool) -> None:
    """Create the directories, keys, configuration files and fake devices ``up`` needs."""
    slurm = pwd.getpwnam(RESTD_USER)
    for path in (layout.etc, layout.logs, layout.pids, layout.root / "munge", layout.devices):
        path.mkdir(parents=True, exist_ok=True)
    # Drain state and stale jobs survive a restart in StateSaveLocation: start clean.
    if fresh_state:
        shutil.rmtree(layout.state, ignore_errors=True)
        shutil.rmtree(layout.spool, ignore_errors=True)
    layout.state.mkdir(parents=True, exist_ok=True)
    for node in NODES:
        (layout.spool / node.name).mkdir(parents=True, exist_ok=True)
    # munged wants its socket directory world-executable and not writable by others;
    # slurmrestd drops privileges before it binds, so its directory belongs to slurm.
    for path in (layout.runtime.parent, layout.runtime, layout.munge_dir):
        path.mkdir(parents=True, exist_ok=True)
        path.chmod(0o755)
    layout.restd_dir.mkdir(parents=True, exist_ok=True)
    os.chown(layout.restd_dir, slurm.pw_uid, slurm.pw_gid)
    layout.restd_dir.chmod(0o755)
    for stale in (layout.restd_socket, layout.munge_socket):
        stale.unlink(missing_ok=True)
    (layout.root / "munge").chmod(0o700)
    write_private(layout.munge_key, os.urandom(1024))
    write_private(layout.jwt_key, os.urandom(32))
    # slurmrestd runs as user slurm and cannot always reach the state directory (a private
    # home): it reads a copy of the configuration in the runtime directory.
    layout.restd_etc.mkdir(exist_ok=True)
    layout.restd_etc.chmod(0o755)
    for directory in (layout.etc, layout.restd_etc):
        (directory / "slurm.conf").write_text(render_slurm_conf(layout))
        (directory / "gres.conf").write_text(render_gres_conf(layout))
        for name in ("slurm.conf", "gres.conf"):
            (directory / name).chmod(0o644)
    make_gpu_devices(layout)
