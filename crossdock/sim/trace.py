"""Load the Alibaba GPU trace (v2023, "openb") node and pod lists into numpy-backed tables.

Both loaders read the whole CSV, check every row and raise :class:`TraceError` naming the
file, the line (1-based, the header is line 1) and the column of the first bad value, so a
typo in a 10 000-line file is found without a debugger.

Node list columns: ``sn,cpu_milli,memory_mib,gpu,model``.
Pod list columns: ``name,cpu_milli,memory_mib,num_gpu,gpu_milli`` and optionally
``gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time``.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from crossdock.queue.errors import CrossdockError

MILLI = 1000
MAX_GPUS_PER_NODE = 8
NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
POD_OPTIONAL = ("gpu_spec", "qos", "pod_phase", "creation_time", "deletion_time", "scheduled_time")
DATA = Path(__file__).resolve().parent / "data"
DEFAULT_NODES = DATA / "openb_node_list_gpu_node.csv"
"""The openb GPU node list (1,213 nodes), shipped with the package (``data/README.md``)."""
DEFAULT_PODS = DATA / "openb_pod_list_default.csv"
"""The openb default pod list (8,152 pods), shipped with the package."""


class TraceError(CrossdockError):
    """A trace file is malformed. ``path``, ``line`` and ``column`` locate the first problem."""

    def __init__(self, path: str | Path, line: int, column: str, message: str):
        self.path, self.line, self.column = str(path), line, column
        super().__init__(f"{path}:{line}: column {column!r}: {message}")


@dataclass(frozen=True)
class NodeTable:
    """One row per node. ``model`` indexes ``models`` (-1: no GPU)."""

    names: tuple[str, ...]
    cpu: np.ndarray        # milli-CPU capacity, int64
    mem: np.ndarray        # MiB, int64
    gpus: np.ndarray       # GPUs on the node, int64 (0..8)
    model: np.ndarray      # int64 index into models, -1 for CPU-only nodes
    models: tuple[str, ...]
    source: str = ""

    def __len__(self) -> int:
        return len(self.names)

    @property
    def total_gpu_milli(self) -> int:
        return int(self.gpus.sum()) * MILLI

    def select(self, mask: np.ndarray) -> "NodeTable":
        keep = np.flatnonzero(mask)
        return NodeTable(tuple(self.names[i] for i in keep), self.cpu[keep], self.mem[keep],
                         self.gpus[keep], self.model[keep], self.models, self.source)


@dataclass(frozen=True)
class PodTable:
    """One row per pod. ``spec`` holds the allowed GPU models as a bit mask over ``models``
    (bit i set: ``models[i]`` allowed); ``ANY`` (all bits) when the pod names no model."""

    names: tuple[str, ...]
    cpu: np.ndarray        # milli-CPU request, int64
    mem: np.ndarray        # MiB, int64
    num_gpu: np.ndarray    # int64
    gpu_milli: np.ndarray  # per GPU, int64 (0 for CPU-only pods)
    spec: np.ndarray       # int64 bit mask over models
    models: tuple[str, ...]
    qos: tuple[str, ...] = ()
    creation: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    deletion: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))
    scheduled: np.ndarray = field(default_factory=lambda: np.zeros(0, np.int64))  # -1: never
    source: str = ""

    ANY = (1 << 62) - 1

    def __len__(self) -> int:
        return len(self.names)

    @property
    def gpu_request_milli(self) -> np.ndarray:
        """Total GPU request of each pod in milli-GPU (num_gpu × gpu_milli)."""
        return self.num_gpu * self.gpu_milli

    @property
    def has_times(self) -> bool:
        return len(self.creation) == len(self)

    def take(self, index: np.ndarray) -> "PodTable":
        idx = np.asarray(index, dtype=np.int64)
        times = self.has_times
        return PodTable(tuple(self.names[i] for i in idx), self.cpu[idx], self.mem[idx],
                        self.num_gpu[idx], self.gpu_milli[idx], self.spec[idx], self.models,
                        tuple(self.qos[i] for i in idx) if self.qos else (),
                        self.creation[idx] if times else self.creation,
                        self.deletion[idx] if times else self.deletion,
                        self.scheduled[idx] if times else self.scheduled, self.source)

    def with_models(self, models: tuple[str, ...]) -> "PodTable":
        """The same pods with ``spec`` re-expressed over another model list (a node table's)."""
        if models == self.models:
            return self
        remap = {i: models.index(m) for i, m in enumerate(self.models) if m in models}
        spec = np.full(len(self), PodTable.ANY, np.int64)
        for row, bits in enumerate(self.spec.tolist()):
            if bits == PodTable.ANY:
                continue
            out = 0
            for i in range(len(self.models)):
                if bits >> i & 1 and i in remap:
                    out |= 1 << remap[i]
            spec[row] = out
        return PodTable(self.names, self.cpu, self.mem, self.num_gpu, self.gpu_milli, spec, models,
                        self.qos, self.creation, self.deletion, self.scheduled, self.source)


def _rows(path: Path, required: tuple[str, ...]) -> tuple[list[str], list[tuple[int, list[str]]]]:
    try:
        handle = path.open(newline="")
    except OSError as exc:
        raise TraceError(path, 0, "-", f"cannot read: {exc.strerror}") from None
    with handle:
        reader = csv.reader(handle)
        header = next(reader, None)
        if header is None:
            raise TraceError(path, 1, "-", "empty file; expected a header line")
        header = [h.strip() for h in header]
        missing = [c for c in required if c not in header]
        if missing:
            raise TraceError(path, 1, missing[0], f"missing column; the header must name {', '.join(required)}")
        rows = []
        for lineno, row in enumerate(reader, start=2):
            if not row or all(not c.strip() for c in row):
                continue
            if len(row) != len(header):
                raise TraceError(path, lineno, header[min(len(row), len(header) - 1)],
                                 f"{len(row)} fields, expected {len(header)}")
            rows.append((lineno, row))
    return header, rows


def _int(path: Path, lineno: int, column: str, text: str, *, low: int = 0, high: int | None = None,
         empty: int | None = None) -> int:
    text = text.strip()
    if not text:
        if empty is not None:
            return empty
        raise TraceError(path, lineno, column, "empty; expected an integer")
    try:
        value = int(text)
    except ValueError:
        try:
            f = float(text)
        except ValueError:
            raise TraceError(path, lineno, column, f"{text!r} is not a number") from None
        if not f.is_integer():
            raise TraceError(path, lineno, column, f"{text!r} is not a whole number") from None
        value = int(f)
    if value < low or (high is not None and value > high):
        bound = f"{low}..{high}" if high is not None else f">= {low}"
        raise TraceError(path, lineno, column, f"{value} is out of range; expected {bound}")
    return value


def load_nodes(path: str | Path) -> NodeTable:
    """Read a node list (``openb_node_list_*.csv``)."""
    p = Path(path)
    header, rows = _rows(p, NODE_COLUMNS)
    col = {name: header.index(name) for name in NODE_COLUMNS}
    names: list[str] = []
    cpu, mem, gpus, model_names = [], [], [], []
    seen: set[str] = set()
    for lineno, row in rows:
        name = row[col["sn"]].strip()
        if not name:
            raise TraceError(p, lineno, "sn", "empty node name")
        if name in seen:
            raise TraceError(p, lineno, "sn", f"duplicate node name {name!r}")
        seen.add(name)
        names.append(name)
        cpu.append(_int(p, lineno, "cpu_milli", row[col["cpu_milli"]], low=1))
        mem.append(_int(p, lineno, "memory_mib", row[col["memory_mib"]]))
        g = _int(p, lineno, "gpu", row[col["gpu"]], high=MAX_GPUS_PER_NODE)
        gpus.append(g)
        m = row[col["model"]].strip()
        if g > 0 and not m:
            raise TraceError(p, lineno, "model", f"node with {g} GPUs has no GPU model")
        model_names.append(m if g > 0 else "")
    models = tuple(sorted({m for m in model_names if m}))
    model = np.array([models.index(m) if m else -1 for m in model_names], np.int64)
    return NodeTable(tuple(names), np.array(cpu, np.int64), np.array(mem, np.int64),
                     np.array(gpus, np.int64), model, models, str(p))


def spec_mask(spec: str, models: tuple[str, ...]) -> int:
    """Bit mask of the models named in ``spec`` ("A|B"); ANY when it names none.
    A named model missing from ``models`` matches no node (mask 0 if none match)."""
    wanted = [s.strip() for s in spec.split("|") if s.strip()]
    if not wanted:
        return PodTable.ANY
    mask = 0
    for w in wanted:
        if w in models:
            mask |= 1 << models.index(w)
    return mask


def load_pods(path: str | Path, models: tuple[str, ...] | None = None) -> PodTable:
    """Read a pod list (``openb_pod_list_*.csv``). ``models`` fixes the bit order of
    ``gpu_spec`` (pass the node table's ``models``); by default the models named in the file."""
    p = Path(path)
    header, rows = _rows(p, POD_COLUMNS)
    col = {name: header.index(name) for name in POD_COLUMNS + POD_OPTIONAL if name in header}
    has_times = "creation_time" in col and "deletion_time" in col
    names, cpu, mem, num, milli, specs, qos = [], [], [], [], [], [], []
    creation, deletion, scheduled = [], [], []
    for lineno, row in rows:
        name = row[col["name"]].strip()
        if not name:
            raise TraceError(p, lineno, "name", "empty pod name")
        names.append(name)
        cpu.append(_int(p, lineno, "cpu_milli", row[col["cpu_milli"]]))
        mem.append(_int(p, lineno, "memory_mib", row[col["memory_mib"]]))
        n = _int(p, lineno, "num_gpu", row[col["num_gpu"]], high=MAX_GPUS_PER_NODE)
        m = _int(p, lineno, "gpu_milli", row[col["gpu_milli"]], high=MILLI)
        if n > 0 and m == 0:
            raise TraceError(p, lineno, "gpu_milli", f"0 for a pod asking for {n} GPU(s); expected 1..1000")
        if n > 1 and m != MILLI:
            raise TraceError(p, lineno, "gpu_milli", f"{m} for a {n}-GPU pod; GPU sharing needs num_gpu = 1")
        num.append(n)
        milli.append(m if n > 0 else 0)
        specs.append(row[col["gpu_spec"]].strip() if "gpu_spec" in col else "")
        qos.append(row[col["qos"]].strip() if "qos" in col else "")
        if has_times:
            c = _int(p, lineno, "creation_time", row[col["creation_time"]])
            d = _int(p, lineno, "deletion_time", row[col["deletion_time"]], empty=-1)
            s = (_int(p, lineno, "scheduled_time", row[col["scheduled_time"]], empty=-1)
                 if "scheduled_time" in col else c)
            if d != -1 and d < c:
                raise TraceError(p, lineno, "deletion_time", f"{d} is before creation_time {c}")
            creation.append(c)
            deletion.append(d)
            scheduled.append(s)
    if models is None:
        models = tuple(sorted({w.strip() for s in specs for w in s.split("|") if w.strip()}))
    spec = np.array([spec_mask(s, models) for s in specs], np.int64)
    return PodTable(tuple(names), np.array(cpu, np.int64), np.array(mem, np.int64), np.array(num, np.int64),
                    np.array(milli, np.int64), spec, models, tuple(qos) if "qos" in col else (),
                    np.array(creation, np.int64) if has_times else np.zeros(0, np.int64),
                    np.array(deletion, np.int64) if has_times else np.zeros(0, np.int64),
                    np.array(scheduled, np.int64) if has_times else np.zeros(0, np.int64), str(p))
