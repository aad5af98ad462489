"""Discovery of this machine's CPUs and memory, from fake /proc and cgroup trees."""

from pathlib import Path

import pytest

from crossdock.backends.local import CAPABILITIES, resources
from crossdock.backends.local.backend import local_nodes
from crossdock.queue.config import parse_config
from crossdock.queue.errors import ConfigError
from crossdock.queue.ports import Capabilities

GIB = 1024 ** 3


def tree(root: Path, files: dict[str, str]) -> tuple[Path, Path]:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root / "proc", root / "cg"


MEMINFO = "MemTotal:       24684084 kB\nMemFree:        19623332 kB\n"


def test_no_cgroup_limits_leave_affinity_and_memtotal(tmp_path):
    proc, cg = tree(tmp_path, {"proc/meminfo": MEMINFO, "proc/self/cgroup": "0::/\n", "cg/cpu.max": "max 100000\n",
                               "cg/memory.max": "max\n"})
    assert resources.cpu_milli(proc, cg, cpus=6) == 6000
    assert resources.memory_mib(proc, cg) == 24684084 // 1024


def test_cgroup_v2_quota_and_memory_max_cap_the_machine(tmp_path):
    proc, cg = tree(tmp_path, {"proc/meminfo": MEMINFO, "proc/self/cgroup": "0::/box/job\n",
                               "cg/box/job/cpu.max": "150000 100000\n", "cg/box/job/memory.max": f"{2 * GIB}\n"})
    assert resources.cpu_milli(proc, cg, cpus=8) == 1500
    assert resources.memory_mib(proc, cg) == 2048


def test_cgroup_v1_quota_and_limit_in_bytes(tmp_path):
    proc, cg = tree(tmp_path, {"proc/meminfo": MEMINFO,
                               "proc/self/cgroup": "4:memory:/docker/abc\n3:cpu,cpuacct:/docker/abc\n",
                               "cg/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "300000\n",
                               "cg/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
                               "cg/memory/docker/abc/memory.limit_in_bytes": f"{3 * GIB}\n"})
    assert resources.cpu_milli(proc, cg, cpus=16) == 3000
    assert resources.memory_mib(proc, cg) == 3072


def test_v1_unlimited_and_a_quota_under_one_cpu(tmp_path):
    proc, cg = tree(tmp_path, {"proc/meminfo": MEMINFO, "proc/self/cgroup": "4:memory:/\n2:cpu:/\n",
                               "cg/memory/memory.limit_in_bytes": "9223372036854771712\n",
                               "cg/cpu/cpu.cfs_quota_us": "20000\n", "cg/cpu/cpu.cfs_period_us": "100000\n"})
    assert resources.memory_mib(proc, cg) == 24684084 // 1024
    assert resources.cpu_milli(proc, cg, cpus=4) == 1000  # a node is never under one CPU


def test_the_tightest_of_several_levels_wins(tmp_path):
    """A container's own cgroup (the mount root) and the path /proc names may both carry a limit."""
    proc, cg = tree(tmp_path, {"proc/meminfo": MEMINFO, "proc/self/cgroup": "0::/a\n",
                               "cg/memory.max": f"{4 * GIB}\n", "cg/a/memory.max": f"{6 * GIB}\n"})
    assert resources.memory_mib(proc, cg) == 4096


def config(cpus, memory_mib, backend="local"):
    return {"priority_classes": {"c": {"value": 1}},
            "pools": {"p": {"backend": backend, "nodes": [{"name": "box", "cpus": cpus, "memory_mib": memory_mib}]}},
            "queues": {"q": {"priority_class": "c", "pools": ["p"]}}}


def test_auto_is_this_machine_and_numbers_stay_declared():
    auto, = local_nodes(parse_config(config("auto", "auto"), backends={"local": CAPABILITIES}), None)
    assert (auto.cpu_milli, auto.memory_mib) == (resources.cpu_milli(), resources.memory_mib())
    declared, = local_nodes(parse_config(config(8, 16384), backends={"local": CAPABILITIES}), None)
    assert (declared.cpu_milli, declared.memory_mib) == (8000, 16384)


def test_auto_is_refused_on_a_backend_that_does_not_measure_its_nodes():
    with pytest.raises(ConfigError, match=r"pools\.p\.nodes\[0\]\.memory_mib: 'auto' needs a backend"):
        parse_config(config(4, "auto", backend="sim"), backends={"sim": Capabilities()})


def test_auto_must_be_spelled_auto():
    with pytest.raises(ConfigError, match=r"pools\.p\.nodes\.0\.cpus"):
        parse_config(config("many", 1024))
