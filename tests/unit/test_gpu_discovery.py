import pytest

from crossdock.backends.local.gpus import parse_nvidia_smi, short_model
from crossdock.backends.local.backend import local_nodes
from crossdock.backends.local.gpus import DiscoveredGpu
from crossdock.queue.config import parse_config

SMI = """0, NVIDIA H200, 143771, GPU-1111, Disabled
1, NVIDIA A100-SXM4-80GB, 81920, GPU-2222, Enabled
garbage line
"""


def test_parse_nvidia_smi_csv():
    gpus = parse_nvidia_smi(SMI)
    assert [(g.index, g.name, g.memory_mib, g.uuid, g.mig_enabled) for g in gpus] == [
        (0, "NVIDIA H200", 143771, "GPU-1111", False), (1, "NVIDIA A100-SXM4-80GB", 81920, "GPU-2222", True)]


@pytest.mark.parametrize("name,model", [("NVIDIA A100-SXM4-80GB", "A100"), ("NVIDIA H200", "H200"),
                                        ("Tesla T4", "T4"), ("NVIDIA L4", "L4")])
def test_short_model(name, model):
    assert short_model(name) == model


def test_discovered_gpus_replace_declared_ones():
    cfg = parse_config({"priority_classes": {"c": {"value": 1}},
                        "pools": {"local": {"backend": "local", "nodes": [{"name": "box", "cpus": 8,
                                                                            "memory_mib": 1024, "gpus": 4}]}},
                        "queues": {"q": {"priority_class": "c", "pools": ["local"]}}})
    declared, = local_nodes(cfg, None)
    assert [g.id for g in declared.gpus] == ["box:0", "box:1", "box:2", "box:3"]
    found, = local_nodes(cfg, [DiscoveredGpu(0, "NVIDIA H200", 143771, "GPU-1")])
    assert [(g.id, g.model, g.memory_mib) for g in found.gpus] == [("box:0", "H200", 143771)]


def test_discovered_gpus_go_to_this_machine_once_and_other_local_pools_keep_their_declared_ones():
    node = lambda name, gpus: {"name": name, "cpus": 8, "memory_mib": 1024, "gpus": gpus, "gpu_model": "A100"}  # noqa: E731
    cfg = parse_config({"priority_classes": {"c": {"value": 1}},
                        "pools": {"local": {"backend": "local", "nodes": [node("box", 0)]},
                                  "gpu": {"backend": "local", "nodes": [node("gpu-a", 2), node("gpu-b", 2)]}},
                        "queues": {"q": {"priority_class": "c", "pools": ["local", "gpu"]}}})
    box, a, b = local_nodes(cfg, [DiscoveredGpu(0, "NVIDIA H200", 143771, "GPU-1")])
    assert [(g.id, g.model) for g in box.gpus] == [("box:0", "H200")]
    assert [(g.id, g.model) for g in a.gpus + b.gpus] == [("gpu-a:0", "A100"), ("gpu-a:1", "A100"),
                                                          ("gpu-b:0", "A100"), ("gpu-b:1", "A100")]
