"""The cluster's configuration files (pure text from a ``Layout``) and the state directory
they are written into: keys, spool, fake GPU devices, the config copy slurmrestd reads."""

from __future__ import annotations

import os
import pwd
import shlex
import shutil

from crossdock.dev.proc import write_private
from crossdock.dev.slurm.layout import ALWAYS_ON, ELASTIC_NODES, ELASTIC_PARTITION, NODES, PARTITIONS, RESTD_USER, Layout

# Deliberately short: slurm's credential lifetime is also the delay before a requeued job
# may start again (cred_expire + 1 s); values under 5 are ignored.
CRED_EXPIRE_S = 10

# Power saving, shortened for tests (Slurm's defaults: SuspendTime off, SuspendTimeout 30 s,
# ResumeTimeout 60 s, power_save_interval 10 s).
SUSPEND_TIME_S = 15
"""Idle seconds before Slurm powers an elastic node down by itself."""
SUSPEND_TIMEOUT_S = 5
RESUME_TIMEOUT_S = 30
"""A node whose slurmd has not registered this long after its resume is set DOWN (its jobs requeued)."""


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
        *power_save_lines(layout),
    ]
    for index, node in enumerate((*NODES, *ELASTIC_NODES)):
        gres = f" Gres=gpu:{node.gpu_type}:{node.gpus}" if node.gpus else ""
        state = "CLOUD" if node in ELASTIC_NODES else "UNKNOWN"
        lines.append(
            f"NodeName={node.name} NodeHostname=localhost NodeAddr=127.0.0.1 Port={d.node_port(index)}"
            f" CPUs={node.cpus} RealMemory={node.memory_mib}{gres} State={state}"
        )
    for part in PARTITIONS:
        extra = " Default=YES" if part.default else ""
        extra += f" PreemptMode={part.preempt_mode}" if part.preempt_mode else ""
        lines.append(
            f"PartitionName={part.name} Nodes={part.nodes} PriorityTier={part.priority_tier}"
            f" MaxTime=INFINITE State=UP{extra}"
        )
    return "\n".join(lines) + "\n"


def power_save_lines(layout: Layout) -> list[str]:
    """Slurm's power saving for the elastic nodes only: every other node and partition is excluded,
    so nothing the other tests use ever powers down."""
    if not ELASTIC_NODES:
        return []
    kept = [p.name for p in PARTITIONS if p.name != ELASTIC_PARTITION]
    return [
        f"ResumeProgram={layout.resume_program}",
        f"SuspendProgram={layout.suspend_program}",
        f"SuspendTime={SUSPEND_TIME_S}",
        f"SuspendTimeout={SUSPEND_TIMEOUT_S}",
        f"ResumeTimeout={RESUME_TIMEOUT_S}",
        "SuspendRate=0",
        "ResumeRate=0",
        f"SuspendExcNodes={ALWAYS_ON}",
        f"SuspendExcParts={','.join(kept)}",
        # idle_on_node_suspend: a node that failed to resume (DOWN) is idle again once powered
        # down, so it may be tried again; power_save_interval: act within a second.
        "SlurmctldParameters=idle_on_node_suspend,power_save_interval=1,power_save_min_interval=0",
        # Powered-down CLOUD nodes are hidden from sinfo and the API otherwise.
        "PrivateData=cloud",
    ]


def render_resume_program(layout: Layout) -> str:
    """slurmctld runs it as ``prog <hostlist>`` with only SLURM_CONF in the environment, every
    descriptor closed and no PATH: it starts each node's slurmd with ``-b`` (boot time = now,
    which is what tells slurmctld the node was resumed), except those named in the fail file."""
    fail, log = shlex.quote(str(layout.resume_fail_file)), shlex.quote(str(layout.power_log))
    return f"""#!/bin/sh
# Slurm's ResumeProgram for the local cluster (written by crossdock.dev.slurm).
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
# slurmctld closes every descriptor: without a stdin the daemon's first file (its log) would be
# descriptor 0, which it then points at /dev/null when it daemonizes, and its jobs fail to launch.
exec </dev/null
started=""
for node in $(scontrol show hostnames "$1"); do
    if [ -f {fail} ] && grep -qx "$node" {fail}; then
        echo "$(date +%s.%N) resume $node: left off (named in {fail})" >>{log}
        continue
    fi
    started="$started $node"
    echo "$(date +%s.%N) resume $node" >>{log}
    # A CLOUD node's address is reset to its name when it powers down.
    scontrol update nodename="$node" nodeaddr=127.0.0.1 nodehostname=localhost >>{log} 2>&1
done
# slurmctld ignores a POWERING_UP node's registration whose boot time (whole seconds, from the
# uptime slurmd reports) is older than the resume request; a slurmd started within the same
# second sometimes reports one second too many and is ignored until ResumeTimeout sets the node
# DOWN. A machine takes longer than 2 s to boot: so does this one.
sleep 2
for node in $started; do
    slurmd -b -N "$node" >>{log} 2>&1
done
"""


def render_suspend_program(layout: Layout) -> str:
    """Stops each node's slurmd by the PID in its pidfile (checked to be a slurmd)."""
    pids, log = shlex.quote(str(layout.pids)), shlex.quote(str(layout.power_log))
    return f"""#!/bin/sh
# Slurm's SuspendProgram for the local cluster (written by crossdock.dev.slurm).
PATH=/usr/sbin:/usr/bin:/sbin:/bin
export PATH
exec </dev/null
for node in $(scontrol show hostnames "$1"); do
    pid=$(cat {pids}/slurmd-"$node".pid 2>/dev/null) || continue
    if [ "$(cat /proc/"$pid"/comm 2>/dev/null)" = slurmd ]; then
        kill "$pid"
        echo "$(date +%s.%N) suspend $node (slurmd $pid)" >>{log}
    fi
done
"""


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
    for node in (*NODES, *ELASTIC_NODES):
        (layout.spool / node.name).mkdir(parents=True, exist_ok=True)
    # slurmctld refuses power-saving programs that are not absolute, executable, or that group
    # or others may write.
    for path, text in ((layout.resume_program, render_resume_program(layout)),
                       (layout.suspend_program, render_suspend_program(layout))):
        path.write_text(text)
        path.chmod(0o755)
    layout.resume_fail_file.unlink(missing_ok=True)
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
