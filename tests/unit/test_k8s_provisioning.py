"""Kubernetes node pools, pure parts: the kwok Node and the Karpenter NodePool/NodeClaim made from
a pool's node template, node states, the max_nodes cap, config errors (no cluster)."""

from __future__ import annotations

import pytest

from crossdock.backends.kubernetes import KubernetesBackend
from crossdock.backends.kubernetes import karpenter as kp
from crossdock.backends.kubernetes import provisioning as pv
from crossdock.backends.kubernetes.nodes import node_of, pool_of
from crossdock.queue.config import NodeTemplate, parse_config
from crossdock.queue.errors import ConfigError
from crossdock.queue.ports import BackendUnavailable, NodeGroup

CFG = parse_config({
    "priority_classes": {"p": {"value": 1}},
    "pools": {
        "gpu": {"backend": "k8s", "selector": {"crossdock.io/pool": "gpu-auto"}, "provisioner": "kwok",
                "max_nodes": 3, "gpu": {"model": "A100"},
                "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
                "node_template": {"cpus": 96, "memory_mib": 1024000, "gpus": 8, "gpu_model": "A100",
                                  "labels": {"team": "ml"}, "taints": ["nvidia.com/gpu=present:NoSchedule"],
                                  "max_pods": 64}},
        "cpu": {"backend": "k8s", "selector": {"crossdock.io/pool": "cpu-auto"}, "provisioner": "karpenter",
                "node_template": {"cpus": 8, "memory_mib": 32768}},
        "bare": {"backend": "k8s", "selector": {"crossdock.io/pool": "bare"}, "provisioner": "kwok"},
        "static": {"backend": "k8s", "selector": {"crossdock.io/pool": "static"}},
    },
    "queues": {"q": {"priority_class": "p", "pools": ["gpu", "cpu"]}},
})


def ready(node: dict) -> dict:
    return {**node, "status": {**node["status"], "conditions": [{"type": "Ready", "status": "True"}]}}


def test_the_backend_offers_both_provisioners():
    assert KubernetesBackend.capabilities.provisioners == ("kwok", "karpenter")


def test_a_kwok_node_has_the_templates_shape_and_lands_in_its_pool():
    pool = CFG.pools["gpu"]
    raw = pv.kwok_node("gpu", pool, pool.node_template, "gpu-abc123")
    labels = raw["metadata"]["labels"]
    assert labels["crossdock.io/pool"] == "gpu-auto" and labels["team"] == "ml"
    assert labels[pv.LABEL_PROVISIONER] == "kwok" and labels[pv.LABEL_NODE_POOL] == "gpu"
    assert raw["metadata"]["annotations"]["kwok.x-k8s.io/node"] == "fake"
    assert raw["spec"]["taints"] == [{"key": "nvidia.com/gpu", "effect": "NoSchedule", "value": "present"}]
    assert pool_of(labels, CFG) == "gpu"
    node = node_of(ready(raw), "gpu", CFG)
    assert (node.cpu_milli, node.memory_mib, len(node.gpus), node.max_pods) == (96_000, 1_024_000, 8, 64)
    assert {g.model for g in node.gpus} == {"A100"} and node.schedulable


@pytest.mark.parametrize("text,taint", [
    ("dedicated=ml:NoExecute", {"key": "dedicated", "value": "ml", "effect": "NoExecute"}),
    ("spot:PreferNoSchedule", {"key": "spot", "effect": "PreferNoSchedule"}),
], ids=["key-value", "key-only"])
def test_template_taints_are_parsed(text, taint):
    assert pv.taints(NodeTemplate(cpus=1, memory_mib=1, taints=[text]), "p") == [taint]


def test_a_bad_taint_names_the_field():
    with pytest.raises(ConfigError, match=r"pools\.p\.node_template\.taints\[0\]: 'oops' is not a taint"):
        pv.taints(NodeTemplate(cpus=1, memory_mib=1, taints=["oops"]), "p")


@pytest.mark.parametrize("pool,provisioner,message", [
    ("bare", "kwok", r"pools\.bare\.node_template: missing"),
    ("static", "kwok", r"pools\.static\.provisioner: None, not 'kwok'"),
    ("nope", "kwok", r"pools\.nope: no such pool"),
], ids=["no-template", "static-pool", "unknown-pool"])
def test_config_errors_are_clear(pool, provisioner, message):
    with pytest.raises(ConfigError, match=message):
        pv.template_of(CFG, pool, provisioner)


READY = {"conditions": [{"type": "Ready", "status": "True"}]}


@pytest.mark.parametrize("meta,status,state,taints", [
    ({}, READY, "ready", ()),
    ({}, {"conditions": [{"type": "Ready", "status": "False"}]}, "starting", ()),
    ({}, {}, "starting", ()),
    ({"deletionTimestamp": "2026-01-01T00:00:00Z"}, READY, "stopping", ()),
    ({"annotations": {pv.ANNOTATION_REMOVING: "1"}}, READY, "stopping", ()),
    ({}, READY, "starting", [{"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}]),
    ({}, READY, "starting", [{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}]),
    ({}, READY, "ready", [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]),
], ids=["ready", "not-ready", "no-conditions", "deleting", "cordoned-for-removal", "not-ready-taint",
        "unregistered", "own-taints-are-fine"])
def test_node_states(meta, status, state, taints):
    group = pv.group_of("p", [{"metadata": {"name": "n", **meta}, "spec": {"taints": list(taints)}, "status": status}])
    assert getattr(group, state) == ("n",)


@pytest.mark.parametrize("ready_,starting,count,room", [(0, 0, 5, 3), (1, 1, 5, 1), (2, 1, 1, 0), (0, 0, -1, 0)],
                         ids=["empty", "some", "full", "negative"])
def test_add_never_passes_max_nodes(ready_, starting, count, room):
    group = NodeGroup("gpu", ready=tuple(f"r{i}" for i in range(ready_)),
                      starting=tuple(f"s{i}" for i in range(starting)), stopping=("x", "y"))
    assert pv.room(CFG.pools["gpu"], group, count) == room


def test_names_are_unique_per_pool():
    names = {pv.new_name("My_Pool") for _ in range(50)}
    assert len(names) == 50 and all(n.startswith("my-pool-") for n in names)


def test_the_kwok_instance_type_gives_the_templates_allocatable():
    it = kp.instance_type(NodeTemplate(cpus=8, memory_mib=32768, gpus=2, gpu_model="L4"))
    assert it["name"] == "crossdock-8c-32768mi-2g-l4"
    assert it["resources"] == {"cpu": f"{8000 + kp.KWOK_OVERHEAD_MILLICPU}m",
                               "memory": f"{32768 + kp.KWOK_OVERHEAD_MIB}Mi", "pods": "110", "nvidia.com/gpu": "2"}


def test_an_instance_type_label_names_a_real_clouds_type():
    assert kp.instance_type_name(NodeTemplate(cpus=8, memory_mib=1, labels={kp.LABEL_INSTANCE_TYPE: "m7i.2xlarge"})) \
        == "m7i.2xlarge"


def test_the_node_pool_never_scales_by_itself():
    pool = CFG.pools["cpu"]
    np = kp.node_pool("cpu", pool, pool.node_template, {"group": "g", "kind": "K", "name": "n"})
    assert np["metadata"]["name"] == "crossdock-cpu"
    assert np["spec"]["limits"] == {"cpu": "0"}
    assert np["spec"]["disruption"] == {"consolidationPolicy": "WhenEmpty", "consolidateAfter": "Never",
                                        "budgets": [{"nodes": "0"}]}
    tmpl = np["spec"]["template"]
    assert tmpl["spec"]["expireAfter"] == "Never"
    assert tmpl["metadata"]["labels"]["crossdock.io/pool"] == "cpu-auto"
    assert {"key": kp.LABEL_INSTANCE_TYPE, "operator": "In", "values": ["crossdock-8c-32768mi"]} \
        in tmpl["spec"]["requirements"]


def test_a_node_claim_belongs_to_the_pools_node_pool():
    pool = CFG.pools["cpu"]
    np = kp.node_pool("cpu", pool, pool.node_template, {"group": "g", "kind": "K", "name": "n"})
    np["metadata"].update(uid="u-1", annotations={"karpenter.sh/nodepool-hash": "42", "other": "x"})
    claim = kp.node_claim("cpu", pool, pool.node_template, "cpu-abc", np)
    meta = claim["metadata"]
    assert meta["labels"][kp.LABEL_NODEPOOL] == "crossdock-cpu"
    assert meta["labels"][pv.LABEL_PROVISIONER] == "karpenter"
    assert meta["ownerReferences"][0]["uid"] == "u-1" and meta["annotations"] == {"karpenter.sh/nodepool-hash": "42"}
    assert claim["spec"]["resources"]["requests"] == {"cpu": "8", "memory": "32768Mi", "pods": "110"}
    assert claim["spec"]["nodeClassRef"] == {"group": "g", "kind": "K", "name": "n"}


def test_only_nodes_crossdock_made_for_the_pool_are_its_own():
    node = {"metadata": {"labels": {pv.LABEL_PROVISIONER: "kwok", pv.LABEL_NODE_POOL: "gpu"}}}
    assert pv.owned(node, "gpu", "kwok")
    assert not pv.owned(node, "cpu", "kwok") and not pv.owned(node, "gpu", "karpenter")
    assert not pv.owned({"metadata": {"labels": {"crossdock.io/pool": "gpu-auto"}}}, "gpu", "kwok")


def test_another_clouds_node_class_is_named_group_kind_name():
    assert kp.node_class_ref("karpenter.k8s.aws/EC2NodeClass/default") == \
        {"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"}
    assert kp.node_class_ref(None) is None
    with pytest.raises(BackendUnavailable, match="NODE_CLASS='EC2NodeClass': write group/Kind/name"):
        kp.node_class_ref("EC2NodeClass")
