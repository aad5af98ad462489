"""GPU discovery on this machine: NVML when the bindings import, else ``nvidia-smi``."""

from __future__ import annotations

import functools
import logging
import shutil
import subprocess
from dataclasses import dataclass

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class DiscoveredGpu:
    index: int
    name: str
    memory_mib: int
    uuid: str
    mig_enabled: bool = False


def _nvml() -> list[DiscoveredGpu] | None:
    try:
        import pynvml  # type: ignore[import-not-found]
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # library present, driver absent
        log.debug("NVML unavailable: %s", exc)
        return None
    try:
        out = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else name
            uuid = pynvml.nvmlDeviceGetUUID(h)
            uuid = uuid.decode() if isinstance(uuid, bytes) else uuid
            mem = pynvml.nvmlDeviceGetMemoryInfo(h).total // (1024 * 1024)
            try:
                mig = pynvml.nvmlDeviceGetMigMode(h)[0] == 1
            except Exception:
                mig = False
            out.append(DiscoveredGpu(i, name, int(mem), uuid, mig))
        return out
    finally:
        pynvml.nvmlShutdown()


def parse_nvidia_smi(text: str) -> list[DiscoveredGpu]:
    """Parse ``--query-gpu=index,name,memory.total,uuid,mig.mode.current --format=csv,noheader,nounits``."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) < 4 or not parts[0].isdigit():
            continue
        mem = int(float(parts[2])) if parts[2].replace(".", "", 1).isdigit() else 0
        mig = len(parts) > 4 and parts[4] == "Enabled"
        gpus.append(DiscoveredGpu(int(parts[0]), parts[1], mem, parts[3], mig))
    return gpus


def _nvidia_smi() -> list[DiscoveredGpu] | None:
    exe = shutil.which("nvidia-smi")
    if not exe:
        return None
    argv = [exe, "--query-gpu=index,name,memory.total,uuid,mig.mode.current", "--format=csv,noheader,nounits"]
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=20, check=True)
    except (subprocess.SubprocessError, OSError) as exc:
        log.warning("nvidia-smi failed: %s", exc)
        return None
    return parse_nvidia_smi(proc.stdout)


def discover() -> list[DiscoveredGpu] | None:
    """The GPUs of this machine, or None when no discovery method works (use the config)."""
    found = _nvml()
    return found if found is not None else _nvidia_smi()


@functools.cache
def discovered() -> tuple[DiscoveredGpu, ...] | None:
    """:func:`discover`, once per process: a submission's admission (before the scheduler's first
    inventory) and the local backend look once instead of loading NVML or running nvidia-smi each time."""
    found = discover()
    return None if found is None else tuple(found)


def short_model(name: str) -> str:
    """``NVIDIA A100-SXM4-80GB`` -> ``A100``; ``NVIDIA H200`` -> ``H200``; ``Tesla T4`` -> ``T4``."""
    words = [w for w in name.replace("NVIDIA", "").replace("Tesla", "").split() if w]
    return words[0].split("-")[0] if words else name
