"""A service's replicas go only to pools whose backend runs replicas (``Capabilities.services``)."""

from __future__ import annotations

from types import SimpleNamespace

from crossdock.queue.config import parse_config
from crossdock.queue.ports import Capabilities
from crossdock.queue.services import ServiceSpec
from crossdock.workers.services import ServiceStep

CONFIG = parse_config({
    "priority_classes": {"inference": {"value": 1000, "preemptible": False}},
    "pools": {"l4": {"backend": "k8s"}, "hpc": {"backend": "slurm", "partition": "gpu"}, "here": {"backend": "local"}},
    "queues": {"inference": {"priority_class": "inference", "pools": ["l4", "hpc", "here"]}},
})
RUNS = {"k8s": Capabilities(services=True), "slurm": Capabilities(), "local": Capabilities(services=True)}


def test_a_pool_whose_backend_runs_no_replica_is_left_out_in_order():
    rt = SimpleNamespace(config=CONFIG, backends=SimpleNamespace(capabilities=RUNS.__getitem__))
    step = ServiceStep(rt, "test", send=lambda *a, **k: None)
    rec = SimpleNamespace(spec=ServiceSpec(name="chat", image="x", port=8080, queue="inference"))
    assert step._pools(rec) == ("l4", "here")
    rec = SimpleNamespace(spec=ServiceSpec(name="chat", image="x", port=8080, queue="inference", pools=["hpc", "here"]))
    assert step._pools(rec) == ("here",)
