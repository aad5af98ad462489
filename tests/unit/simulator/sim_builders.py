"""Tiny hand-made clusters and workloads for the simulator tests."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from crossdock.sim.cluster import ClusterState, PodReq
from crossdock.sim.trace import NodeTable, PodTable
from crossdock.queue.scheduler.plugins.gpu_frag import ANY_MODEL, TypicalPods

MODELS = ("A10", "T4")


def nodes(*shapes: tuple[int, int, int, str]) -> NodeTable:
    """shapes: (cpu_milli, memory_mib, gpus, model)"""
    return NodeTable(tuple(f"n{i}" for i in range(len(shapes))),
                     np.array([s[0] for s in shapes], np.int64), np.array([s[1] for s in shapes], np.int64),
                     np.array([s[2] for s in shapes], np.int64),
                     np.array([MODELS.index(s[3]) if s[2] else -1 for s in shapes], np.int64), MODELS)


def state(table: NodeTable, typical: TypicalPods | None = None, gpu_left: list[list[int]] | None = None,
          cpu_left: list[int] | None = None) -> ClusterState:
    st = ClusterState(table, typical)
    if gpu_left is not None:
        for i, row in enumerate(gpu_left):
            st.gpu_left[i, :len(row)] = row
    if cpu_left is not None:
        st.cpu_left[:] = cpu_left
    for i in range(len(table)):
        st._refresh(i)
    return st


def typical(*rows: tuple[int, int, int, float], spec: list[int] | None = None) -> TypicalPods:
    """rows: (cpu, milli per GPU, num GPUs, frequency)"""
    return TypicalPods(np.array([r[0] for r in rows], np.int64), np.array([r[1] for r in rows], np.int64),
                       np.array([r[2] for r in rows], np.int64),
                       np.array(spec if spec is not None else [ANY_MODEL] * len(rows), np.int64),
                       np.array([r[3] for r in rows], np.float64))


def pod(cpu: int = 1000, milli: int = 0, num: int = 0, mem: int = 0, spec: int = ANY_MODEL) -> PodReq:
    return PodReq(cpu, mem, num, milli, spec)


def pods(rows: list[tuple[int, int, int]], models: tuple[str, ...] = MODELS) -> PodTable:
    """rows: (cpu, num_gpu, gpu_milli)"""
    n = len(rows)
    return PodTable(tuple(f"p{i}" for i in range(n)), np.array([r[0] for r in rows], np.int64),
                    np.zeros(n, np.int64), np.array([r[1] for r in rows], np.int64),
                    np.array([r[2] for r in rows], np.int64), np.full(n, PodTable.ANY, np.int64), models)


NODE_CSV = "sn,cpu_milli,memory_mib,gpu,model\nn0,32000,65536,2,T4\nn1,64000,131072,8,A10\nn2,8000,16384,0,\n"
POD_CSV = ("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n"
           "p0,4000,8192,1,500,,LS,Running,0,100,0\n"
           "p1,8000,8192,1,1000,A10|T4,BE,Running,10,50,10\n"
           "p2,2000,1024,0,0,,BE,Running,20,200,20\n"
           "p3,16000,8192,2,1000,T4,LS,Pending,30,90,\n")


def write(tmp: Path, name: str, text: str) -> Path:
    p = tmp / name
    p.write_text(text)
    return p
