"""crossdock jobs → batch/v1 Job manifests: names, resources, placement, gangs, arrays."""

from __future__ import annotations

import json
from typing import Any

import pytest

from crossdock.backends.kubernetes import manifests as m
from crossdock.backends.kubernetes import once
from crossdock.queue.config import parse_config
from crossdock.queue.models import ArraySpec, GpuRequest, Job, JobSpec

CONFIG = parse_config({
    "priority_classes": {
        "inference": {"value": 1000},
        "training": {"value": 100, "preemptible": True, "grace_seconds": 45},
    },
    "pools": {
        "a100": {"backend": "k8s", "selector": {"crossdock.io/pool": "a100"}, "gpu": {"model": "A100"},
                 "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]},
        "l4": {"backend": "k8s", "selector": {"crossdock.io/pool": "l4"}, "gpu": {"model": "L4"}},
        "cpu": {"backend": "k8s", "selector": {"crossdock.io/pool": "cpu"},
                "features": {"ib": {"net": "ib"}, "fast": {"tier": "1", "disk": "nvme"}}},
        "hpc": {"backend": "slurm", "partition": "gpu"},
    },
    "queues": {
        "training": {"priority_class": "training", "pools": ["a100", "hpc"], "placement": "binpack"},
        "inference": {"priority_class": "inference", "pools": ["l4", "cpu"], "placement": "spread",
                      "cpu_request_ratio": 0.5},
    },
})
PRODUCTS = {"a100": ("NVIDIA-A100-SXM4-80GB",), "l4": ("NVIDIA-L4",)}
OPTS = m.Options(namespace="batch", gpu_products=PRODUCTS, deadline_slack_seconds=30, ttl_seconds_after_finished=600)


class JobBuilder:
    """``job().gpus(2, "A100").on("a100-1")`` → a placed training Job."""

    def __init__(self, job_id: int = 42) -> None:
        self.spec: dict[str, Any] = {"command": ["python", "train.py"], "args": ["--epochs", "3"]}
        self.job: dict[str, Any] = {"id": job_id, "attempts": 2, "queue": "training", "priority_class": "training",
                                    "pools": ["a100", "hpc"], "pool": "a100"}

    def gpus(self, count: int, model: str | None = None, **kw: Any) -> "JobBuilder":
        self.spec["gpus"] = GpuRequest(count=count, type=model, **kw)
        return self

    def on(self, *nodes: str) -> "JobBuilder":
        self.job["nodes"] = list(nodes)
        return self

    def set(self, **kw: Any) -> "JobBuilder":
        self.spec.update(kw)
        return self

    def queue(self, name: str, pool: str) -> "JobBuilder":
        self.job.update(queue=name, priority_class=name, pools=[pool], pool=pool)
        return self

    def with_(self, **kw: Any) -> "JobBuilder":
        self.job.update(kw)
        return self

    def build(self) -> Job:
        return Job(spec=JobSpec(**self.spec), **self.job)

    def manifest(self, opts: m.Options = OPTS) -> dict[str, Any]:
        return m.build(self.build(), CONFIG, opts)


def job(job_id: int = 42) -> JobBuilder:
    return JobBuilder(job_id)


def pod_spec(manifest: dict[str, Any]) -> dict[str, Any]:
    return manifest["spec"]["template"]["spec"]


def container(manifest: dict[str, Any]) -> dict[str, Any]:
    return pod_spec(manifest)["containers"][0]


def env(manifest: dict[str, Any]) -> dict[str, str]:
    return {e["name"]: e.get("value") for e in container(manifest)["env"]}


def test_name_labels_and_annotations_identify_the_attempt() -> None:
    man = job(42).set(name="resnet", user="ada").manifest()
    assert man["apiVersion"] == "batch/v1" and man["kind"] == "Job"
    assert man["metadata"]["name"] == "cd-42-2" == m.job_name(42, 2)
    assert man["metadata"]["namespace"] == "batch"
    for labels in (man["metadata"]["labels"], man["spec"]["template"]["metadata"]["labels"]):
        assert labels[m.LABEL_JOB_ID] == "42" and labels[m.LABEL_ATTEMPT] == "2"
        assert labels[m.LABEL_MANAGED_BY] == "crossdock"
        assert labels[m.LABEL_QUEUE] == "training" and labels[m.LABEL_POOL] == "a100"
    assert man["metadata"]["annotations"] == {m.ANNOTATION_NAME: "resnet", m.ANNOTATION_USER: "ada"}


def test_objects_carry_their_stores_identity_and_only_its_own_are_its_own() -> None:
    import dataclasses

    man = job(42).manifest(dataclasses.replace(OPTS, installation="a1b2c3d4e5f6"))
    for labels in (man["metadata"]["labels"], man["spec"]["template"]["metadata"]["labels"]):
        assert labels[m.LABEL_INSTALLATION] == "a1b2c3d4e5f6"
    assert m.LABEL_INSTALLATION not in job(42).manifest()["metadata"]["labels"]  # no identity: none labelled
    mine, theirs, unlabelled = {m.LABEL_INSTALLATION: "a1b2c3d4e5f6"}, {m.LABEL_INSTALLATION: "0ld0ld0ld0ld"}, {}
    # a store started afresh: its own objects only
    assert [m.owned_by(x, "a1b2c3d4e5f6", False) for x in (mine, theirs, unlabelled)] == [True, False, False]
    # an upgraded store: also those made before stores had an identity
    assert [m.owned_by(x, "a1b2c3d4e5f6", True) for x in (mine, theirs, unlabelled)] == [True, False, True]


def test_same_job_gives_the_same_manifest() -> None:
    a, b = job().gpus(2, "A100").manifest(), job().gpus(2, "A100").manifest()
    assert json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)


def test_gpu_limits_equal_requests_and_cpu_memory_from_the_spec() -> None:
    man = job().gpus(4, "A100").set(cpus_per_task=8, mem_per_node_mib=65536).manifest()
    res = container(man)["resources"]
    assert res["requests"] == {"cpu": "8", "memory": "65536Mi", "nvidia.com/gpu": "4"}
    assert res["limits"] == res["requests"]


def test_cpu_request_follows_the_queue_ratio_and_limit_stays_whole() -> None:
    man = job().queue("inference", "l4").set(cpus_per_task=3).manifest()
    res = container(man)["resources"]
    assert res["requests"]["cpu"] == "1500m" and res["limits"]["cpu"] == "3"
    assert "nvidia.com/gpu" not in res["requests"]


def test_mig_profile_is_its_own_resource() -> None:
    res = container(job().gpus(2, "A100", mig="1g.10gb").manifest())["resources"]
    assert res["requests"]["nvidia.com/mig-1g.10gb"] == res["limits"]["nvidia.com/mig-1g.10gb"] == "2"
    assert "nvidia.com/gpu" not in res["requests"]


def test_gpu_share_asks_for_one_shared_gpu() -> None:
    res = container(job().gpus(1, "L4", share=0.25).queue("inference", "l4").manifest())["resources"]
    assert res["limits"] == {**res["limits"], "nvidia.com/gpu.shared": "1"}


def test_pool_selector_gpu_product_tolerations_and_priority_class() -> None:
    spec = pod_spec(job().gpus(1, "A100").manifest())
    assert spec["nodeSelector"] == {"crossdock.io/pool": "a100", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    assert spec["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    assert spec["priorityClassName"] == "crossdock-training" == m.priority_class_name("training")
    assert spec["restartPolicy"] == "Never"
    assert spec["terminationGracePeriodSeconds"] == 45


def test_unknown_gpu_model_is_selected_by_its_own_name() -> None:
    spec = pod_spec(job().gpus(1, "H100").manifest())
    assert spec["nodeSelector"]["nvidia.com/gpu.product"] == "H100"


def test_several_models_become_a_node_affinity_over_their_products() -> None:
    spec = pod_spec(job().gpus(1, "A100", models=["L4"]).manifest())
    assert "nvidia.com/gpu.product" not in spec["nodeSelector"]
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                            "values": ["NVIDIA-A100-SXM4-80GB", "NVIDIA-L4"]}]}]


def test_one_model_sold_as_several_products_allows_each() -> None:
    opts = m.Options(gpu_products={"a100": ("NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB")})
    spec = pod_spec(job().gpus(1, "A100").on("a100-1").manifest(opts))
    assert "nvidia.com/gpu.product" not in spec["nodeSelector"]
    term = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert term == {"matchExpressions": [{"key": "nvidia.com/gpu.product", "operator": "In",
                                          "values": ["NVIDIA-A100-SXM4-40GB", "NVIDIA-A100-SXM4-80GB"]}],
                    "matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a100-1"]}]}
    unpinned = pod_spec(job().gpus(1, "A100").manifest(opts))["affinity"]["nodeAffinity"]
    assert unpinned["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"] == \
        [{"matchExpressions": term["matchExpressions"]}]


def test_chosen_node_is_pinned_by_name_and_no_soft_placement_is_added() -> None:
    man = job().gpus(8, "A100").on("a100-3").manifest()
    spec = pod_spec(man)
    terms = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["a100-3"]}]}]
    assert "podAffinity" not in spec["affinity"] and "topologySpreadConstraints" not in spec


def test_excluded_nodes_are_kept_out() -> None:
    spec = pod_spec(job().set(exclude=["a100-0"]).manifest())
    fields = spec["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"][0]["matchFields"]
    assert {"key": "metadata.name", "operator": "NotIn", "values": ["a100-0"]} in fields


def test_gang_is_an_indexed_job_one_worker_per_node() -> None:
    man = job(7).gpus(8, "A100").set(nodes=4).on("a100-0", "a100-1", "a100-2", "a100-3").manifest()
    spec = man["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 4, 4)
    group = spec["template"]["metadata"]["labels"][m.LABEL_GROUP]
    assert group == "7-2"
    anti = pod_spec(man)["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti == [{"labelSelector": {"matchLabels": {m.LABEL_GROUP: "7-2"}}, "topologyKey": "kubernetes.io/hostname"}]
    terms = pod_spec(man)["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"]
    assert [t["matchFields"] for t in terms] == [[{"key": "metadata.name", "operator": "In", "values": [n]}]
                                                 for n in ("a100-0", "a100-1", "a100-2", "a100-3")]
    assert pod_spec(man)["schedulingGates"] == [{"name": m.GANG_GATE}]  # released whole by the backend
    assert pod_spec(job().manifest())["schedulingGates"] == [{"name": once.GATE}]  # one run let through
    index = next(e for e in container(man)["env"] if e["name"] == "CROSSDOCK_INDEX")
    assert "job-completion-index" in index["valueFrom"]["fieldRef"]["fieldPath"]
    assert env(man)["SLURM_NODEID"] == "$(CROSSDOCK_INDEX)"  # the worker's rank, expanded by Kubernetes
    assert container(man)["resources"]["limits"]["nvidia.com/gpu"] == "8"  # per worker


def test_anti_affinity_flag_on_one_node_job() -> None:
    man = job().with_(array_job_id=5, array_task_id=1).set(anti_affinity=True).manifest()
    anti = pod_spec(man)["affinity"]["podAntiAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert anti[0]["labelSelector"]["matchLabels"] == {m.LABEL_GROUP: "a5"}


def test_spread_queue_gets_a_hard_topology_spread_over_its_group() -> None:
    man = job(9).queue("inference", "l4").with_(array_job_id=9, array_task_id=0).manifest()
    spread = pod_spec(man)["topologySpreadConstraints"]
    assert spread == [{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule",
                       "labelSelector": {"matchLabels": {m.LABEL_GROUP: "a9"}},
                       "nodeAffinityPolicy": "Honor", "nodeTaintsPolicy": "Honor"}]


def test_binpack_queue_prefers_its_group_when_unplaced() -> None:
    aff = pod_spec(job().manifest())["affinity"]["podAffinity"]["preferredDuringSchedulingIgnoredDuringExecution"]
    assert aff[0]["weight"] == 100
    assert aff[0]["podAffinityTerm"]["topologyKey"] == "kubernetes.io/hostname"


def test_time_limit_sets_pod_and_job_deadlines() -> None:
    man = job().set(time_limit_seconds=10 * 60).manifest()
    assert pod_spec(man)["activeDeadlineSeconds"] == 600
    assert man["spec"]["activeDeadlineSeconds"] == 630
    none = job().manifest()
    assert "activeDeadlineSeconds" not in none["spec"] and "activeDeadlineSeconds" not in pod_spec(none)


def test_time_limit_in_seconds_is_kept_exactly() -> None:
    """Kubernetes takes seconds: a 90 s limit from the Python API is not rounded to minutes."""
    man = job().set(time_limit_seconds=90).manifest()
    assert pod_spec(man)["activeDeadlineSeconds"] == 90
    assert man["spec"]["activeDeadlineSeconds"] == 90 + OPTS.deadline_slack_seconds


def test_kubernetes_never_retries_and_finished_jobs_expire() -> None:
    man = job().manifest()
    assert man["spec"]["backoffLimit"] == 0
    assert man["spec"]["ttlSecondsAfterFinished"] == 600
    no_ttl = job().manifest(m.Options(ttl_seconds_after_finished=None))
    assert "ttlSecondsAfterFinished" not in no_ttl["spec"]


def test_command_and_environment() -> None:
    man = job(42).set(env={"FOO": "bar"}, workdir="/data").manifest()
    assert container(man)["command"] == ["python", "train.py", "--epochs", "3"]
    assert container(man)["workingDir"] == "/data"
    e = env(man)
    assert e["FOO"] == "bar" and e["SLURM_JOB_ID"] == "42" and e["CROSSDOCK_ATTEMPT"] == "2"


@pytest.mark.parametrize("flags,scope", [("", ""), ("B:", "B")], ids=["every-process", "batch-shell"])
def test_signal_wraps_the_command_in_a_timer_that_fires_before_the_limit(flags, scope) -> None:
    from crossdock.queue.sbatch_extras import parse_signal

    man = job().set(time_limit_seconds=600, kill_signal=parse_signal(f"{flags}USR1@90")).manifest()
    argv = container(man)["command"]
    assert argv[:2] == ["/bin/sh", "-c"] and argv[3:7] == ["crossdock-signal", "10", "510", scope]
    assert argv[7:] == ["python", "train.py", "--epochs", "3"]  # the command itself, untouched
    assert pod_spec(man)["activeDeadlineSeconds"] == 600  # the limit stays the kubelet's


def test_signal_without_a_time_limit_leaves_the_command_alone() -> None:
    from crossdock.queue.sbatch_extras import parse_signal

    man = job().set(kill_signal=parse_signal("USR1@90")).manifest()
    assert container(man)["command"] == ["python", "train.py", "--epochs", "3"]


def test_script_travels_in_the_environment_not_the_command_line() -> None:
    script = "#!/bin/bash\necho 'hi'; rm -rf \"$x\"\n"
    man = job().set(command=None, script=script, args=["a b"]).manifest()
    argv = container(man)["command"]
    assert argv[:2] == ["/bin/sh", "-c"] and argv[-1] == "a b"
    assert all(script not in part for part in argv)
    assert env(man)["CROSSDOCK_SCRIPT"] == script


def test_simulation_settings_become_kwok_annotations_and_image_override() -> None:
    man = job().set(env={"CROSSDOCK_SIMULATE_RUN_SECONDS": "5", "CROSSDOCK_SIMULATE_EXIT_CODE": "3",
                         "CROSSDOCK_IMAGE": "ghcr.io/acme/train:1"}).manifest()
    ann = man["spec"]["template"]["metadata"]["annotations"]
    assert ann[m.ANNOTATION_RUN_SECONDS] == "5" and ann[m.ANNOTATION_EXIT_CODE] == "3"
    assert not {"CROSSDOCK_SIMULATE_RUN_SECONDS", "CROSSDOCK_IMAGE"} & set(env(man))
    assert container(man)["image"] == "ghcr.io/acme/train:1"
    assert container(job().manifest(m.Options(image="busybox")))["image"] == "busybox"


def test_crossdock_gpu_choice_is_recorded_on_the_pod() -> None:
    man = job().gpus(2, "A100").on("a100-1").with_(gpu_ids=["a100-1:0", "a100-1:1"]).manifest()
    assert man["spec"]["template"]["metadata"]["annotations"][m.ANNOTATION_GPU_IDS] == "a100-1:0,a100-1:1"


def test_array_is_one_indexed_job_with_task_ids_by_index() -> None:
    spec = {"command": ["work"], "array": ArraySpec(task_ids=[3, 5, 9], max_running=2)}
    tasks = [Job(id=100 + t, spec=JobSpec(**spec), attempts=1, array_job_id=100, array_task_id=t, queue="training",
                 priority_class="training", pools=["a100"], pool="a100") for t in (3, 5, 9)]
    man = m.build(tasks[0], CONFIG, OPTS, array_tasks=tasks)
    assert man["metadata"]["name"] == "cd-a100-1" == m.array_name(100, 1)
    s = man["spec"]
    assert (s["completionMode"], s["completions"], s["parallelism"], s["backoffLimitPerIndex"]) == ("Indexed", 3, 2, 0)
    assert man["metadata"]["annotations"][m.ANNOTATION_ARRAY_JOBS] == "103:3,105:5,109:9"
    labels = s["template"]["metadata"]["labels"]
    assert labels[m.LABEL_ARRAY_JOB] == "100" and m.LABEL_JOB_ID not in labels
    e = env(man)
    assert e["CROSSDOCK_ARRAY_TASK_IDS"] == "3 5 9" and "SLURM_ARRAY_TASK_ID" not in e
    assert container(man)["command"][-1] == "work"


def test_job_without_a_k8s_pool_is_refused_with_the_fix() -> None:
    with pytest.raises(ValueError, match="none of its pools .*hpc.* is a k8s pool"):
        job().with_(pool="hpc", pools=["hpc"]).manifest()


def test_first_k8s_pool_when_the_scheduler_named_none() -> None:
    man = job().with_(pool=None, pools=["hpc", "a100"]).manifest()
    assert pod_spec(man)["nodeSelector"]["crossdock.io/pool"] == "a100"


@pytest.mark.parametrize(("product", "model"), [
    ("NVIDIA-A100-SXM4-80GB", "A100"), ("NVIDIA-L4", "L4"), ("Tesla-T4", "T4"), ("NVIDIA H200", "H200"),
    ("NVIDIA-H100-80GB-HBM3", "H100"), ("A10G", "A10G"),
])
def test_gpu_model_from_product_label(product: str, model: str) -> None:
    assert m.gpu_model(product) == model


def test_manifest_is_plain_json() -> None:
    man = job().gpus(2, "A100").set(nodes=2, time_limit_seconds=5 * 60).on("a100-0", "a100-1").manifest()
    assert json.loads(json.dumps(man)) == man


@pytest.mark.parametrize("owner,expected", [
    ((1234, 100), {"runAsUser": 1234, "runAsGroup": 100, "runAsNonRoot": True}),
    ((0, 0), {"runAsUser": 0, "runAsGroup": 0, "runAsNonRoot": False}),
], ids=["a-user", "root"])
def test_pods_run_as_the_jobs_owner(owner, expected) -> None:
    man = m.build(job().set(user="alice").build(), CONFIG, OPTS, owner_ids=owner)
    assert pod_spec(man)["securityContext"] == expected


def test_a_job_without_an_owner_gets_no_security_context() -> None:
    assert "securityContext" not in pod_spec(job().manifest())


def test_owner_ids_come_from_the_passwd_entry_or_a_bare_uid() -> None:
    from crossdock.backends.kubernetes.backend import owner_ids

    assert owner_ids("root") == (0, 0)
    assert owner_ids("4321") == (4321, 4321)
    assert owner_ids("no-such-user-here") is None


def test_a_pod_pinned_by_name_matches_that_node_only() -> None:
    from crossdock.backends.kubernetes import gangs

    spec = pod_spec(job().on("kwok-np-abc-1").manifest())

    def node(name: str) -> dict:
        labels = {**spec.get("nodeSelector", {}), "kubernetes.io/hostname": "np-abc"}
        return {"metadata": {"name": name, "labels": labels},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}}

    assert gangs.matches(spec, node("kwok-np-abc-1")) and not gangs.matches(spec, node("np-abc"))


@pytest.mark.parametrize("constraint,added", [
    pytest.param("ib", {"net": "ib"}, id="one"),
    pytest.param("ib&fast", {"net": "ib", "tier": "1", "disk": "nvme"}, id="and"),
    pytest.param("ib|fast", {}, id="or-left-to-the-chosen-nodes"),
    pytest.param(None, {}, id="none"),
])
def test_constraint_features_become_node_selector_labels(constraint, added):
    spec = pod_spec(job().queue("inference", "cpu").set(constraint=constraint).manifest())
    assert spec["nodeSelector"] == {"crossdock.io/pool": "cpu", **added}
