"""deploy/helm/crossdock on the local control plane: rendered and installed by a helm built from its
Go module, its Deployments created and every pod bound on a kwok node; its RBAC grants exactly the
calls crossdock's Kubernetes backend makes (checked against the source) and nothing else."""

from __future__ import annotations

import re
import subprocess
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from k8s_helpers import wait_for
from tests.conftest import in_ci

pytestmark = [pytest.mark.operate, pytest.mark.kubernetes]

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "deploy" / "helm" / "crossdock"
BACKEND = ROOT / "crossdock" / "backends" / "kubernetes"

# Every Kubernetes client call the backend makes -> the (apiGroup, resource, verb)s it needs, and
# whether that rule is cluster-wide. A new call fails test_rbac_covers_every_call_the_backend_makes
# until the chart's rbac.yaml and this table grant it.
CALLS: dict[str, tuple[tuple[str, str, str, bool], ...]] = {
    "create_namespaced_job": (("batch", "jobs", "create", False),),
    "read_namespaced_job": (("batch", "jobs", "get", False),),
    "list_namespaced_job": (("batch", "jobs", "list", False), ("batch", "jobs", "watch", False)),  # informer
    "patch_namespaced_job": (("batch", "jobs", "patch", False),),
    "delete_namespaced_job": (("batch", "jobs", "delete", False),),
    "list_namespaced_pod": (("", "pods", "list", False), ("", "pods", "watch", False)),  # informer
    "patch_namespaced_pod": (("", "pods", "patch", False),),
    "delete_collection_namespaced_pod": (("", "pods", "deletecollection", False),),
    "read_namespaced_pod_log": (("", "pods/log", "get", False),),
    "list_namespaced_event": (("", "events", "list", False),),
    "create_namespaced_event": (("", "events", "create", False),),  # Kubernetes Events on crossdock's Jobs
    "create_namespaced_service": (("", "services", "create", False),),
    "read_namespaced_service": (("", "services", "get", False),),  # an inference service's Service
    "patch_namespaced_service": (("", "services", "patch", False),),
    "delete_namespaced_service": (("", "services", "delete", False),),
    "create_namespaced_pod_eviction": (("", "pods/eviction", "create", False),),  # the descheduler's moves
    "list_namespaced_pod_disruption_budget": (("policy", "poddisruptionbudgets", "list", False),),
    "read_namespaced_deployment": (("apps", "deployments", "get", False),),
    "read_namespaced_deployment_scale": (("apps", "deployments/scale", "get", False),),
    "patch_namespaced_deployment_scale": (("apps", "deployments/scale", "patch", False),),
    "list_node": (("", "nodes", "list", True),),
    "read_node": (("", "nodes", "get", True),),
    "create_node": (("", "nodes", "create", True),),
    "patch_node": (("", "nodes", "patch", True),),
    "delete_node": (("", "nodes", "delete", True),),
    "list_pod_for_all_namespaces": (("", "pods", "list", True),),
    "read_priority_class": (("scheduling.k8s.io", "priorityclasses", "get", True),),
    "create_priority_class": (("scheduling.k8s.io", "priorityclasses", "create", True),),
    "patch_priority_class": (("scheduling.k8s.io", "priorityclasses", "patch", True),),
    "delete_priority_class": (("scheduling.k8s.io", "priorityclasses", "delete", True),),
    # Karpenter: NodePools and the kwok provider's node classes (create or patch), NodeClaims
    "create_cluster_custom_object": (("karpenter.sh", "nodepools", "create", True),
                                     ("karpenter.sh", "nodeclaims", "create", True),
                                     ("karpenter.kwok.sh", "kwoknodeclasses", "create", True)),
    "patch_cluster_custom_object": (("karpenter.sh", "nodepools", "patch", True),
                                    ("karpenter.kwok.sh", "kwoknodeclasses", "patch", True)),
    "list_cluster_custom_object": (("karpenter.sh", "nodeclaims", "list", True),),
    "delete_cluster_custom_object": (("karpenter.sh", "nodeclaims", "delete", True),),
}
EVERYTHING = ["--set", "kubernetes.nodeProvisioning=true", "--set", "kubernetes.karpenter=true",
              "--set", "kubernetes.fleets=true"]


@pytest.fixture(scope="module")
def helm() -> Path:
    from crossdock.dev import helm as dev_helm

    try:
        return dev_helm.binary()
    except dev_helm.HelmUnavailable as err:
        if in_ci():
            pytest.fail(str(err), pytrace=False)
        pytest.skip(str(err))


def render(helm: Path, *args: str, namespace: str = "crossdock") -> list[dict]:
    out = subprocess.run([str(helm), "template", "t", str(CHART), "--namespace", namespace, *args],
                         capture_output=True, text=True, check=True).stdout
    return [d for d in yaml.safe_load_all(out) if d]


def granted(docs: list[dict]) -> set[tuple[str, str, str, bool]]:
    rules = set()
    for doc in docs:
        if doc["kind"] in ("Role", "ClusterRole"):
            for rule in doc["rules"]:
                for group in rule["apiGroups"]:
                    for resource in rule["resources"]:
                        rules.update((group, resource, verb, doc["kind"] == "ClusterRole") for verb in rule["verbs"])
    return rules


def test_rbac_covers_every_call_the_backend_makes(helm):
    source = "\n".join(p.read_text() for p in sorted(BACKEND.glob("*.py")))
    calls = set(re.findall(r"\b(?:core|batch|apps|scheduling|custom|policy)\.((?:list|read|create|patch|replace|delete|"
                           r"connect)_\w+)\b", source))
    assert calls, "found no Kubernetes client call in the backend: the scan is broken"
    assert calls <= set(CALLS), f"calls missing from the chart's RBAC table: {sorted(calls - set(CALLS))}"
    wanted = {rule for rules in CALLS.values() for rule in rules}
    # namespaced pod listing is also granted cluster-wide (the inventory lists pods in every namespace)
    assert granted(render(helm, *EVERYTHING)) == wanted


def test_rbac_by_default_grants_no_node_writes_no_fleets_no_karpenter(helm):
    rules = granted(render(helm))
    assert ("", "nodes", "list", True) in rules and ("batch", "jobs", "create", False) in rules
    assert not {r for r in rules if r[0] in ("karpenter.sh", "apps") or (r[1] == "nodes" and r[2] != "list")}


def test_chart_renders_external_sentinel_redis_without_its_own(helm, tmp_path):
    url = "redis+sentinel://s-0:26379,s-1:26379/crossdock/0"
    (tmp_path / "values.yaml").write_text(yaml.safe_dump({"redis": {"enabled": False, "url": url}}))
    docs = render(helm, "-f", str(tmp_path / "values.yaml"))
    assert not [d for d in docs if "redis" in d["metadata"]["name"]]
    scheduler = next(d for d in docs if d["kind"] == "Deployment" and d["metadata"]["name"].endswith("-scheduler"))
    env = {e["name"]: e.get("value") for e in scheduler["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["CROSSDOCK_REDIS_URL"] == url
    failed = subprocess.run([str(helm), "template", "t", str(CHART), "--set", "redis.enabled=false"],
                            capture_output=True, text=True)
    assert failed.returncode != 0 and "redis.url (or redis.existingSecret) is required" in failed.stderr


@pytest.fixture
def release_namespace(k8s_client):
    core = client.CoreV1Api(k8s_client)
    name = f"cd-opdeploy-{uuid.uuid4().hex[:8]}"
    yield name
    try:
        core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    finally:
        try:
            core.delete_namespace(name)
        except client.ApiException as err:
            if err.status != 404:
                raise


def can(authz, namespace, sa, verb, resource, group="", ns=None) -> bool:
    review = client.V1SubjectAccessReview(spec=client.V1SubjectAccessReviewSpec(
        user=f"system:serviceaccount:{namespace}:{sa}",
        resource_attributes=client.V1ResourceAttributes(verb=verb, resource=resource.split("/")[0],
                                                        subresource=(resource.split("/") + [""])[1] or None,
                                                        group=group, namespace=ns)))
    return authz.create_subject_access_review(review).status.allowed


def test_chart_installs_on_the_local_plane(helm, k8s_kubeconfig, k8s_client, release_namespace):
    ns, release = release_namespace, "cd"
    install = subprocess.run([str(helm), "install", release, str(CHART), "--namespace", ns, "--create-namespace",
                              "--kubeconfig", str(k8s_kubeconfig), "--set-json", 'nodeSelector={"type":"kwok"}',
                              "--set-json", 'tolerations=[{"operator":"Exists"}]'],
                             capture_output=True, text=True, timeout=120)
    assert install.returncode == 0, install.stderr
    cleanup = [str(helm), "uninstall", release, "--namespace", ns, "--kubeconfig", str(k8s_kubeconfig)]
    try:
        apps, core = client.AppsV1Api(k8s_client), client.CoreV1Api(k8s_client)
        deployments = {d.metadata.name: d.spec.replicas for d in apps.list_namespaced_deployment(ns).items}
        assert deployments == {"cd-crossdock-scheduler": 2, "cd-crossdock-worker-k8s": 2, "cd-crossdock-api": 1,
                               "cd-crossdock-redis": 1}
        kwok = {n.metadata.name for n in core.list_node(label_selector="type=kwok").items}

        def bound():
            pods = core.list_namespaced_pod(ns).items
            done = [p for p in pods if p.spec.node_name in kwok and p.status.phase == "Running"]
            return pods if len(pods) == sum(deployments.values()) == len(done) else None

        pods = wait_for("every pod of the release Running on a kwok node", bound, timeout=120)
        components = sorted(p.metadata.labels["app.kubernetes.io/component"] for p in pods)
        assert components == ["api", "redis", "scheduler", "scheduler", "worker", "worker"]
        ready = wait_for("every Deployment available", lambda: all(
            (d.status.available_replicas or 0) == d.spec.replicas for d in apps.list_namespaced_deployment(ns).items)
            or None, timeout=120)
        assert ready
        # least privilege, as the API server decides it for the release's service account
        authz, sa = client.AuthorizationV1Api(k8s_client), "cd-crossdock"
        for verb, resource, group in [("create", "jobs", "batch"), ("watch", "pods", ""), ("get", "pods/log", ""),
                                      ("deletecollection", "pods", ""), ("create", "services", "")]:
            assert can(authz, ns, sa, verb, resource, group, ns), (verb, resource)
        assert can(authz, ns, sa, "list", "nodes") and can(authz, ns, sa, "create", "priorityclasses",
                                                          "scheduling.k8s.io")
        for verb, resource, group, where in [("get", "secrets", "", ns), ("create", "pods", "", ns),
                                             ("delete", "nodes", "", None), ("create", "jobs", "batch", "default"),
                                             ("patch", "deployments/scale", "apps", ns), ("list", "configmaps", "", ns)]:
            assert not can(authz, ns, sa, verb, resource, group, where), (verb, resource, where)
        backend_as_the_service_account(k8s_client, ns, sa)
    finally:
        subprocess.run(cleanup, capture_output=True, timeout=120)


def backend_as_the_service_account(admin: client.ApiClient, ns: str, sa: str) -> None:
    """crossdock's Kubernetes backend with the service account's own token: it syncs its priority
    classes, reads the inventory, runs a job to COMPLETED and cancels another; the RBAC is enough."""
    from crossdock.backends.kubernetes import KubernetesBackend
    from crossdock.backends.kubernetes.manifests import LABEL_JOB_ID
    from crossdock.queue.config import parse_config
    from crossdock.queue.models import Job, JobSpec
    from crossdock.queue.states import JobState

    token = client.CoreV1Api(admin).create_namespaced_service_account_token(
        sa, ns, client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[],
                                                                                  expiration_seconds=600))).status.token
    conf = client.Configuration()
    conf.host, conf.ssl_ca_cert, conf.verify_ssl = (admin.configuration.host, admin.configuration.ssl_ca_cert,
                                                    admin.configuration.verify_ssl)
    conf.api_key = {"authorization": f"Bearer {token}"}
    klass = f"opd{uuid.uuid4().hex[:6]}"  # the plane is shared: PriorityClasses of this test's own
    cfg = parse_config({"priority_classes": {klass: {"value": 10, "preemptible": True, "grace_seconds": 1}},
                        "pools": {"cpu": {"backend": "k8s", "selector": {"crossdock.io/pool": "cpu"}}},
                        "queues": {"q": {"priority_class": klass, "pools": ["cpu"]}}})
    scheduling = client.SchedulingV1Api(admin)
    with client.ApiClient(conf) as api:
        backend = KubernetesBackend(cfg, api, namespace=ns, ttl_seconds_after_finished=None, deadline_slack_seconds=0)
        with pytest.raises(client.ApiException) as refused:  # it is the service account, not the admin
            client.CoreV1Api(api).list_namespaced_secret(ns)
        assert refused.value.status == 403
        try:
            assert backend.sync_priority_classes() == [f"crossdock-{klass}"]
            assert {n.pool for n in backend.inventory().nodes} == {"cpu"}

            def job(job_id: int, seconds: float) -> Job:
                spec = JobSpec(command=["python", "work.py"], env={"CROSSDOCK_SIMULATE_RUN_SECONDS": str(seconds)})
                return Job(id=job_id, spec=spec, queue="q", priority_class=klass, priority=10, preemptible=True,
                           pools=["cpu"], pool="cpu", attempts=1, backend="k8s")

            short, long = job(910001, 1), job(910002, 600)
            backend.submit(short)
            backend.submit(long)
            state = lambda j: (st := backend.status([j]).get(j.id)) and st.state  # noqa: E731
            assert wait_for("the short job to complete", lambda: state(short) is JobState.COMPLETED, timeout=90)
            wait_for("the long job to run", lambda: state(long) is JobState.RUNNING, timeout=90)
            backend.cancel(long)
            wait_for("the long job's pods gone", lambda: not client.CoreV1Api(admin).list_namespaced_pod(
                ns, label_selector=f"{LABEL_JOB_ID}={long.id}").items or None, timeout=90)
        finally:
            backend.close()
            scheduling.delete_priority_class(f"crossdock-{klass}")
