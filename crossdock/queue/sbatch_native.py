"""sbatch options crossdock does not model but Slurm does: passed to ``sbatch`` as written.

They say how a job's tasks sit on cores, sockets and GPUs (``--hint``, ``--distribution``,
``--threads-per-core``…) or ask Slurm for node properties crossdock does not track (``--tmp``,
``--switches``, burst buffers). Only Slurm can honour them, so a job that carries one is placed
only in pools with a Slurm partition; ignoring them elsewhere would run the job laid out
differently from what its script asked. The rest of sbatch's options that crossdock does not take
are refused, each with why (``REFUSED``).
"""

from __future__ import annotations

from typing import Literal

Arg = Literal["required", "optional", "none"]

# long name -> (short letter, argument)
NATIVE: dict[str, tuple[str | None, Arg]] = {
    "hint": (None, "required"),
    "distribution": ("m", "required"),
    "ntasks-per-core": (None, "required"),
    "ntasks-per-socket": (None, "required"),
    "threads-per-core": (None, "required"),
    "cores-per-socket": (None, "required"),
    "sockets-per-node": (None, "required"),
    "extra-node-info": ("B", "required"),
    "mem-bind": (None, "required"),
    "gpu-bind": (None, "required"),
    "gpu-freq": (None, "required"),
    "gpus-per-socket": (None, "required"),
    "tres-bind": (None, "required"),
    "tres-per-task": (None, "required"),
    "tmp": (None, "required"),
    "mincpus": (None, "required"),
    "contiguous": (None, "none"),
    "switches": (None, "required"),
    "network": (None, "required"),
    "core-spec": ("S", "required"),
    "thread-spec": (None, "required"),
    "prefer": (None, "required"),
    "power": (None, "required"),
    "delay-boot": (None, "required"),
    "spread-job": (None, "none"),
    "use-min-nodes": (None, "none"),
    "oversubscribe": ("s", "none"),
    "overcommit": ("O", "none"),
    "no-kill": ("k", "optional"),
    "wait-all-nodes": (None, "required"),
    "batch": (None, "required"),
    "bb": (None, "required"),
    "bbf": (None, "required"),
    "burst-buffer": (None, "required"),
    "segment": (None, "required"),
    "extra": (None, "required"),
    "mcs-label": (None, "required"),
    "input": ("i", "required"),
}

# sbatch options crossdock refuses, with why and what to do instead.
REFUSED: dict[str, str] = {
    "uid": "every job runs as the user who submits it",
    "gid": "every job runs as the user who submits it",
    "wait": "submit returns at once; wait with `crossdock wait ID` (crossdock.wait() in Python)",
    "immediate": "every job is queued; a job that cannot start at once waits",
    "export-file": "give variables with --export=VAR=value",
    "nodefile": "give hosts with --nodelist",
    "ignore-pbs": "only #SBATCH lines are read",
    "priority": "priorities come from priority classes (--qos/--priority-class) and --nice",
    "reboot": "nodes are rebooted by their administrators, not by jobs",
    "container": "run a container image with --image on a Kubernetes pool",
    "container-id": "run a container image with --image on a Kubernetes pool",
    "cluster-constraint": "one crossdock queue spans its clusters; choose pools with -p",
}
REFUSED_SHORT = {"F": "nodefile", "I": "immediate", "W": "wait"}


def native_arg(name: str, value: str | None) -> str:
    """The option as sbatch reads it: ``--name=value`` or ``--name``."""
    return f"--{name}" if value is None else f"--{name}={value}"


def native_name(arg: str) -> str:
    """The long name in a stored ``--name[=value]`` (``ValueError`` if it is none of ``NATIVE``)."""
    name = arg[2:].partition("=")[0] if arg.startswith("--") else ""
    if name not in NATIVE:
        raise ValueError(f"{arg!r} is not an sbatch option crossdock passes to Slurm"
                         f" (those are: {', '.join('--' + n for n in NATIVE)})")
    return name
