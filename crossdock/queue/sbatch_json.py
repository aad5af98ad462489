"""A submission's normalized spec as stable, JSON-ready fields (``crossdock submit --dry-run --json``)."""

from __future__ import annotations

from typing import Any

from crossdock.queue.models import JobSpec


def dry_run_json(spec: JobSpec) -> dict[str, Any]:
    """The normalized spec as stable, JSON-ready fields (``crossdock submit --dry-run --json``)."""
    gpus = spec.gpus
    return {
        "name": spec.name or spec.display_name(),
        "time_limit_seconds": spec.time_limit_seconds,
        "cpus_per_task": spec.cpus_per_task,
        "ntasks": spec.ntasks,
        "nodes": spec.nodes,
        "nodes_max": spec.nodes_max,
        "ntasks_per_node": spec.ntasks_per_node,
        "mem_per_node_mib": spec.mem_per_node_mib,
        "mem_per_cpu_mib": spec.mem_per_cpu_mib,
        "gres": [{"name": g.name, "type": g.type, "count": g.count} for g in spec.gres],
        "gpus": None if gpus is None else {"count": gpus.count, "type": gpus.type, "per": gpus.per},
        "array": None
        if spec.array is None
        else {"task_ids": list(spec.array.task_ids), "max_running": spec.array.max_running},
        "dependency": None
        if spec.dependency is None
        else {
            "combine": spec.dependency.combine,
            "deps": [
                {
                    "type": d.type.value,
                    "job_id": d.job_id,
                    "array_task": d.array_task,
                    "delay_minutes": d.delay_minutes,
                }
                for d in spec.dependency.deps
            ],
        },
        "nice": spec.nice,
        "hold": spec.hold,
        "partition": spec.partition,
        "qos": spec.priority_class,
        "priority_class": spec.priority_class,
        "queue": spec.queue,
        "backend": spec.backend,
        "pool": spec.pool,
        "placement": spec.placement,
        "output": spec.stdout,
        "error": spec.stderr,
        "chdir": spec.workdir,
        "export": spec.export,
        "env": dict(spec.env),
        "exclusive": spec.exclusive,
        "requeue": spec.requeue,
        "nodelist": list(spec.nodelist),
        "exclude": list(spec.exclude),
        "constraint": spec.constraint,
        "signal": None if spec.kill_signal is None else spec.kill_signal.model_dump(),
        "time_min_seconds": spec.time_min_seconds,
        "begin": None if spec.begin is None else spec.begin.isoformat(),
        "deadline": None if spec.deadline is None else spec.deadline.isoformat(),
        "reservation": spec.reservation,
        "licenses": spec.licenses,
        "slurm_options": spec.slurm_options,
        "command": list(spec.command) if spec.command is not None else None,
        "script_path": spec.script_path,
        "args": list(spec.args),
    }
