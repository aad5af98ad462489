"""Differential test: crossdock's HPA arithmetic against the real kube-controller-manager.

crossdock's external metrics adapter serves a scripted queue backlog on loopback, registered as
the APIService ``v1beta1.external.metrics.k8s.io`` behind an ExternalName Service (localhost).
autoscaling/v2 HPAs with an External metric, one on the legacy path (no ``behavior``), one with
every ``behavior`` field set, and two leaving fields unset (``behavior: {}``; and one without
scale-up rules, scale-down window, select policy or scale-down tolerance), scale Deployments whose
pods kwok makes Ready. Their behavior reaches ``normalize`` as the API server stored it. The dev plane's controller syncs every second.

Every metric request is one controller sync. The adapter's value source answers it with the next
value of the script (so the trace does not depend on timing) and notes what the controller read
just before: the Deployment's ``spec.replicas`` (the scale it reads; nobody else writes it) and
``status.replicas`` (the AverageValue path's replica count). Replaying those syncs through
``recommend`` + ``normalize`` with crossdock's own history (recommendations seeded with
``(0, current)``; scale events in the controller's slots, kept by ``record_scale_event``; both aged
by the syncs' times) must predict what the controller set at every sync: the ``spec.replicas`` the
next sync reads.

Times are the adapter's, a few milliseconds before the controller's own clock reading; a
prediction that only differs because a recommendation or event sits within ``EPSILON`` of a
window's edge is resolved by shifting every age by ±``EPSILON`` (counted and reported).
"""

from __future__ import annotations

import dataclasses
import math
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException
from kubernetes.utils import parse_quantity

from crossdock.backends.kubernetes.external_metrics import (APISERVICE_NAME, BACKLOG_METRIC, GROUP, QUEUE_LABEL, VERSION,
                                                            ExternalMetricsAdapter, apiservice_manifest,
                                                            service_manifest, store_backlog_source)
from crossdock.dev.k8s import LABEL_POOL, components
from crossdock.dev.k8s.state import read_state
from crossdock.queue.autoscale.hpa import event_ages, normalize, recommend, record_scale_event, tolerances
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.states import JobState
from k8s_helpers import wait_for

pytestmark = [pytest.mark.kubernetes, pytest.mark.autoscale]

PER_REPLICA = 10
EPSILON = 0.15
"""Seconds: how far the adapter's clock may be from the controller's for one sync."""
READY_QUEUE = "adapter-ready"

# One value per controller sync; the last one holds until the test ends.
LEGACY_SCRIPT = (
    [10] * 3            # steady at 1 replica
    + [95] * 5          # step up: 10 wanted, capped at max(2×current, 4) per sync
    + [30] * 8          # step down: held by the 5 s stabilization, then 3
    + [32] * 3 + [34]   # within the 10 % tolerance, then just outside it
    + [0] * 9           # to zero (minReplicas 0) after the stabilization
    + [25] * 3          # from zero
    + list(range(30, 151, 20)) + list(range(130, 0, -20))   # ramp up to maxReplicas and down
    + [20, 60] * 5      # sawtooth: scale-ups at once, scale-downs stabilized
    + [40]
)
BEHAVIOR_SCRIPT = (
    [10] * 3
    + [150] * 6         # step up: 15 wanted, 2 s up-stabilization, rate-limited by the policies
    + [40] * 4          # −20 % is within the scale-down tolerance (10 % would scale down)
    + [20] * 8          # step down: 4 s stabilization, then the Min policy's steps
    + list(range(40, 161, 20)) + list(range(140, 0, -20))
    + [30, 90] * 5
    + [50]
)
VALUE_TARGET = 40
VALUE_SCRIPT = (    # a Value target: ratio = backlog / 40, times the Ready pods
    [40] * 3 + [240]    # 6 × 1 ready pod, limited by the default policies to max(1 + 4, 2 × 1) = 5:
                        # the first scale event of the run, so no earlier event's timing moves the limit
    + [40] * 4 + [60]   # 1.5 × 5 ready pods, within the default policies' 15 s period
    + [40] * 3 + [20] * 7 + [40] * 3   # halve, after the flag's window (behavior: {} sets none)
    + [0] * 7           # zero wanted, minReplicas 1
    + [40] * 2 + [320]  # 8 × 1 wanted; the default policies' limit counts the scale-downs of the last 15 s
    + [40] * 3 + [44, 36] * 3 + [40]   # ±10 %: exactly at the tolerance's edges
)
UNSET_SCRIPT = (    # scaleUp: only a tolerance; scaleDown: only a policy of 1 pod per 2 s
    [10] * 3
    + [100] * 4         # up by the default policies: max(current + 4, 2 × current) per 15 s
    + [10] * 10         # down after the flag's window (scaleDown sets none), 1 pod per 2 s
    + [20, 60] * 3      # sawtooth: up by the default policies, down held by the flag's window
    + [10]
)
UNSET_BEHAVIOR = {"scaleUp": {"tolerance": "0.06"},
                  "scaleDown": {"policies": [{"type": "Pods", "value": 1, "periodSeconds": 2}]}}
BEHAVIOR = {
    "scaleUp": {"stabilizationWindowSeconds": 2, "selectPolicy": "Max", "tolerance": "0.05",
                "policies": [{"type": "Pods", "value": 2, "periodSeconds": 3},
                             {"type": "Percent", "value": 50, "periodSeconds": 3}]},
    "scaleDown": {"stabilizationWindowSeconds": 4, "selectPolicy": "Min", "tolerance": "0.2",
                  "policies": [{"type": "Pods", "value": 2, "periodSeconds": 3},
                               {"type": "Percent", "value": 30, "periodSeconds": 3}]},
}


@dataclasses.dataclass(frozen=True)
class Sync:
    """One controller sync as the adapter saw it."""

    at: float           # time.monotonic() when the value was handed back
    value: float        # the backlog served
    spec: int           # Deployment spec.replicas: the scale the controller read
    status: int         # Deployment status.replicas (the AverageValue path's replica count)
    ready: int          # its pods Running and Ready (the Value path's)
    settled: bool       # status and pods caught up with spec (observedGeneration == generation, counts equal)


class Run:
    """One HPA's script and the syncs served to it."""

    def __init__(self, name: str, script: list[int], api: client.ApiClient, namespace: str) -> None:
        self.name, self.script, self.namespace = name, script, namespace
        self.apps, self.core = client.AppsV1Api(api), client.CoreV1Api(api)
        self.syncs: list[Sync] = []
        self._lock = threading.Lock()

    def serve(self) -> float:
        with self._lock:  # the controller syncs one HPA at a time; the lock only guards the list
            value = self.script[min(len(self.syncs), len(self.script) - 1)]
            dep = self.apps.read_namespaced_deployment(self.name, self.namespace)
            spec, status = dep.spec.replicas or 0, dep.status.replicas or 0
            pods = self.core.list_namespaced_pod(self.namespace, label_selector=f"app={self.name}").items
            ready = sum(p.status.phase == "Running" and any(
                c.type == "Ready" and c.status == "True" for c in p.status.conditions or []) for p in pods)
            settled = dep.status.observed_generation == dep.metadata.generation and spec == status == ready
            self.syncs.append(Sync(time.monotonic(), float(value), spec, status, ready, settled))
            return float(value)


def _go_seconds(text: str) -> float:
    units = {"h": 3600, "m": 60, "s": 1, "ms": 0.001}
    return sum(float(n) * units[u] for n, u in re.findall(r"([\d.]+)(ms|h|m|s)", text))


def controller_flag(kubeconfig: Path, flag: str, default: float) -> float:
    """A duration flag of the running kube-controller-manager (the dev plane's state), else ``default``."""
    args = read_state(kubeconfig.parent).get("processes", {}).get("kube-controller-manager", {}).get("args", [])
    for arg in args:
        if arg.startswith(f"--{flag}="):
            return _go_seconds(arg.split("=", 1)[1])
    return default




def deployment(name: str) -> dict[str, Any]:
    labels = {"app": name}
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
            "spec": {"replicas": 1, "selector": {"matchLabels": labels},
                     "template": {"metadata": {"labels": labels}, "spec": {
                         "nodeSelector": {LABEL_POOL: "cpu"}, "terminationGracePeriodSeconds": 0,
                         "containers": [{"name": "worker", "image": "registry.invalid/crossdock/worker:1",
                                         "resources": {"requests": {"cpu": "10m", "memory": "16Mi"}}}]}}}}


def hpa(name: str, *, min_replicas: int, max_replicas: int, behavior: dict | None,
        target_type: str = "AverageValue", target: int = PER_REPLICA) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name},
        "minReplicas": min_replicas, "maxReplicas": max_replicas,
        "metrics": [{"type": "External", "external": {
            "metric": {"name": BACKLOG_METRIC, "selector": {"matchLabels": {QUEUE_LABEL: name}}},
            "target": {"type": target_type, "value" if target_type == "Value" else "averageValue": str(target)}}}],
    }
    if behavior is not None:
        spec["behavior"] = behavior
    return {"apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler", "metadata": {"name": name},
            "spec": spec}


def stored_behavior(autoscaling: client.AutoscalingV2Api, namespace: str, name: str) -> dict[str, Any] | None:
    """The HPA's behavior as the API server defaulted and stored it, in autoscaling/v2 field names
    (tolerances as numbers), unset fields left out: ``normalize`` fills them as the controller does."""
    stored = autoscaling.read_namespaced_horizontal_pod_autoscaler(name, namespace)
    behavior = client.ApiClient().sanitize_for_serialization(stored.spec.behavior)
    if not behavior:
        return None
    for rules in behavior.values():
        if rules.get("tolerance") is not None:
            rules["tolerance"] = float(parse_quantity(rules["tolerance"]))
    return behavior


@dataclasses.dataclass
class Replay:
    """crossdock's side: recommend + normalize over the syncs, with its own history."""

    min_replicas: int
    max_replicas: int
    behavior: dict[str, Any] | None
    legacy_window: float
    target_type: str = "AverageValue"
    target: int = PER_REPLICA
    recommendations: list[tuple[float, int]] = dataclasses.field(default_factory=list)
    events: list[tuple[float, int]] = dataclasses.field(default_factory=list)
    """(time, signed change), kept by crossdock's ``record_scale_event`` as the controller keeps them."""

    def tolerances(self) -> dict[str, float]:
        up, down = tolerances(self.behavior)
        return {"scale_up_tolerance": up, "scale_down_tolerance": down}

    def predict(self, sync: Sync, raw: int, shift: float = 0.0) -> int:
        def aged(items: list[tuple[float, int]]) -> list[tuple[float, int]]:
            return [(sync.at - at + shift, n) for at, n in items]

        return normalize(sync.spec, raw, min_replicas=self.min_replicas, max_replicas=self.max_replicas,
                         behavior=self.behavior, recommendations=aged(self.recommendations),
                         **event_ages(self.events, sync.at + shift),
                         downscale_stabilization=self.legacy_window)

    def raw(self, sync: Sync, **tolerances: float | None) -> int:
        """``recommend`` with what the controller passes: the status replicas for AverageValue
        (``GetExternalPerPodMetricReplicas``), the scale's replicas and the Ready pods for Value."""
        tolerances = tolerances or self.tolerances()
        if self.target_type == "AverageValue":
            return recommend(sync.status, sync.value, self.target, target_type="AverageValue", **tolerances)
        return recommend(sync.spec, sync.value, self.target, target_type="Value", ready_replicas=sync.ready,
                         **tolerances)

    def step(self, sync: Sync, actual: int, before: Sync) -> tuple[int, int, str]:
        """(raw recommendation, prediction, how it was resolved) for one sync, then the history
        moves on as the controller's did.

        Resolved ``""``: exactly. ``"edge"``: with every age shifted by ±EPSILON (an entry at a
        window's edge). ``"previous"``: with the replica counts of the previous sync, when this
        sync's read found the Deployment catching up (the controller read them just before)."""
        if not self.recommendations:
            self.recommendations.append((sync.at, sync.spec))  # the controller's first pass: (0, current)
        reads = [sync]
        if not sync.settled and (before.status, before.ready) != (sync.status, sync.ready):
            reads.append(dataclasses.replace(sync, status=before.status, ready=before.ready))
        raw = self.raw(sync)
        predicted, how = self.predict(sync, raw), ""
        for read, shift in [(read, shift) for read in reads for shift in (0.0, EPSILON, -EPSILON)]:
            candidate = self.raw(read)
            if self.predict(sync, candidate, shift) == actual:
                raw, predicted = candidate, actual
                how = "" if (read, shift) == (sync, 0.0) else ("previous" if read is not sync else "edge")
                break
        self.recommendations.append((sync.at, raw))
        if predicted != sync.spec:
            self.events = record_scale_event(self.events, sync.at, predicted - sync.spec, self.behavior)
        return raw, predicted, how


@pytest.fixture
def serve_metrics(k8s_client, k8s_kubeconfig, k8s_namespace, tmp_path):
    """``serve_metrics(source)``: the adapter over ``source`` on loopback, registered as the
    APIService and answering through the aggregator. At the end the namespace's HPAs and
    Deployments go first (the namespace fixture then finds no pods coming back), then the
    APIService and the adapter."""
    core = client.CoreV1Api(k8s_client)
    registration = client.ApiregistrationV1Api(k8s_client)
    servers: list[ExternalMetricsAdapter] = []

    def serve(source: Callable[[str, str, dict[str, str]], float | None]) -> ExternalMetricsAdapter:
        def answer(namespace: str, metric: str, labels: dict[str, str]) -> float | None:
            return 0.0 if labels.get(QUEUE_LABEL) == READY_QUEUE else source(namespace, metric, labels)

        front_proxy_ca = k8s_kubeconfig.parent / "pki" / "front-proxy-ca.crt"
        server = ExternalMetricsAdapter(answer, cert_dir=tmp_path / "certs",
                                        client_ca_file=front_proxy_ca if front_proxy_ca.is_file() else None).start()
        servers.append(server)
        core.create_namespaced_service(k8s_namespace, service_manifest(k8s_namespace, "crossdock-metrics", server.port))
        body = apiservice_manifest(k8s_namespace, "crossdock-metrics", server.port)
        try:
            registration.create_api_service(body)
        except ApiException as err:
            if err.status != 409:
                raise
            body["metadata"]["resourceVersion"] = registration.read_api_service(APISERVICE_NAME).metadata.resource_version
            registration.replace_api_service(APISERVICE_NAME, body)

        def reachable() -> bool:  # GET /apis/external.metrics.k8s.io/v1beta1/namespaces/NS/METRIC?labelSelector=…
            try:
                return bool(client.CustomObjectsApi(k8s_client).list_namespaced_custom_object(
                    GROUP, VERSION, k8s_namespace, BACKLOG_METRIC,
                    label_selector=f"{QUEUE_LABEL}={READY_QUEUE}")["items"])
            except ApiException:
                return False

        wait_for("the external metrics API through the aggregator", reachable, 60)
        return server

    try:
        yield serve
    finally:
        client.AutoscalingV2Api(k8s_client).delete_collection_namespaced_horizontal_pod_autoscaler(k8s_namespace)
        client.AppsV1Api(k8s_client).delete_collection_namespaced_deployment(k8s_namespace)
        wait_for("the Deployments' pods gone", lambda: not core.list_namespaced_pod(k8s_namespace).items, 60)
        if servers:
            try:
                registration.delete_api_service(APISERVICE_NAME)
            except ApiException as err:
                if err.status != 404:
                    raise
        for server in servers:
            server.close()


class Lagging(dict):
    """Syncs served of each script so far (what a timeout shows); false until every script is."""

    def __bool__(self) -> bool:
        return False


@dataclasses.dataclass(frozen=True)
class Compared:
    sync: Sync
    raw: int
    crossdock: int
    controller: int
    resolved: str

    def row(self, t0: float) -> str:
        mark = "!!" if self.crossdock != self.controller else ("~ " if self.resolved else "  ")
        s = self.sync
        return (f"{mark}t={s.at - t0:6.2f} backlog={s.value:5.0f} spec={s.spec:2d} status={s.status:2d}"
                f" ready={s.ready:2d}"
                f"{' ' if s.settled else '*'} raw={self.raw:2d} crossdock={self.crossdock:2d}"
                f" controller={self.controller:2d} {self.resolved}")


def compare(syncs: list[Sync], replay: Replay) -> list[Compared]:
    """Each sync but the last against what the controller set: the next sync's ``spec``."""
    out = []
    for before, sync, after in zip([syncs[0], *syncs], syncs, syncs[1:]):
        raw, predicted, how = replay.step(sync, after.spec, before)
        out.append(Compared(sync, raw, predicted, after.spec, how))
    return out


@pytest.mark.timeout(600)  # ~70 s here; a loaded machine stretches the controller's 1 s syncs
def test_crossdock_predicts_the_hpa_controllers_replicas_at_every_sync(serve_metrics, k8s_client, k8s_kubeconfig,
                                                                       k8s_namespace):
    runs: dict[str, Run] = {}

    def scripted(namespace: str, metric: str, labels: dict[str, str]) -> float | None:
        run = runs.get(labels.get(QUEUE_LABEL, ""))
        return None if run is None or namespace != k8s_namespace else run.serve()

    serve_metrics(scripted)
    apps = client.AppsV1Api(k8s_client)
    autoscaling = client.AutoscalingV2Api(k8s_client)
    sync_period = controller_flag(k8s_kubeconfig, "horizontal-pod-autoscaler-sync-period",
                                  components.HPA_SYNC_PERIOD_SECONDS)
    legacy_window = controller_flag(k8s_kubeconfig, "horizontal-pod-autoscaler-downscale-stabilization",
                                    components.HPA_DOWNSCALE_STABILIZATION_SECONDS)
    cases = {"legacy": (LEGACY_SCRIPT, 0, 12, None, "AverageValue", PER_REPLICA),
             "behavior": (BEHAVIOR_SCRIPT, 1, 20, BEHAVIOR, "AverageValue", PER_REPLICA),
             "value": (VALUE_SCRIPT, 1, 16, {}, "Value", VALUE_TARGET),
             "unset": (UNSET_SCRIPT, 1, 12, UNSET_BEHAVIOR, "AverageValue", PER_REPLICA)}
    for name in cases:
        apps.create_namespaced_deployment(k8s_namespace, deployment(name))
    wait_for("one ready replica per Deployment", lambda: all(
        (apps.read_namespaced_deployment(n, k8s_namespace).status.ready_replicas or 0) == 1 for n in cases), 60)

    # Each queue has its source before its HPA exists: the HPA's first sync is the first request seen.
    for name, (script, *_) in cases.items():
        runs[name] = Run(name, list(script), k8s_client, k8s_namespace)
    replays = {}
    for name, (_script, lo, hi, behavior, target_type, target) in cases.items():
        autoscaling.create_namespaced_horizontal_pod_autoscaler(k8s_namespace, hpa(
            name, min_replicas=lo, max_replicas=hi, behavior=behavior, target_type=target_type, target=target))
        replays[name] = Replay(lo, hi, stored_behavior(autoscaling, k8s_namespace, name), legacy_window,
                               target_type, target)
    assert replays["legacy"].behavior is None and replays["behavior"].behavior is not None
    # What the API server leaves unset, normalize() fills: scaleDown's window, the tolerances.
    for name in ("value", "unset"):
        stored = replays[name].behavior
        assert "stabilizationWindowSeconds" not in stored["scaleDown"], stored
        assert "tolerance" not in stored["scaleDown"], stored
    assert replays["unset"].behavior["scaleUp"]["tolerance"] == 0.06

    longest = max(len(script) for script, *_ in cases.values())
    def served() -> bool | Lagging:
        counts = Lagging({n: f"{len(runs[n].syncs)}/{len(cases[n][0]) + 1}" for n in cases})
        return all(len(runs[n].syncs) > len(cases[n][0]) for n in cases) or counts

    wait_for("every script served, plus one sync to see its last decision", served,
             timeout=longest * (sync_period * 6 + 1) + 60, interval=0.5)
    autoscaling.delete_collection_namespaced_horizontal_pod_autoscaler(k8s_namespace)

    report, failures, results = [], [], {}
    for name in cases:
        syncs = list(runs[name].syncs)
        results[name] = compared = compare(syncs, replays[name])
        differ = [c for c in compared if c.crossdock != c.controller]
        report.append(f"{name}: {len(compared)} syncs compared, {len(differ)} differ,"
                      f" {sum(c.resolved == 'edge' for c in compared)} resolved at a window's edge,"
                      f" {sum(c.resolved == 'previous' for c in compared)} with the previous sync's counts"
                      f" ({sum(not s.settled for s in syncs)} read while the Deployment caught up);"
                      f" replicas {sorted({s.spec for s in syncs})}")
        table = f"{name}:\n" + "\n".join(c.row(syncs[0].at) for c in compared)
        print(table)  # shown by pytest with the outcome of a failing test, or with -s
        if differ:
            failures.append(table)
    print("\n".join(report))
    assert not failures, "\n".join(report) + "\n\n" + "\n\n".join(failures)

    # The traces went where they were meant to: the legacy cap (1 → 4 → 8), max and zero; the
    # behavior policies limiting a step up; the tolerances keeping a replica count; Ready pods
    # multiplying a Value target's ratio.
    legacy, behaved, valued = results["legacy"], results["behavior"], results["value"]
    assert {0, 4, 8, 12} <= {c.controller for c in legacy}
    assert any(c.sync.spec < c.controller < c.raw for c in behaved), "no rate-limited scale-up"
    assert any(c.raw == c.sync.spec != math.ceil(c.sync.value / PER_REPLICA) for c in legacy), "no tolerance"
    replay = replays["behavior"]
    assert any(replay.raw(c.sync) != replay.raw(c.sync, tolerance=0.1) for c in behaved), \
        "the per-direction tolerances never mattered"
    assert any(c.raw > math.ceil(c.sync.value / VALUE_TARGET) for c in valued), "Ready pods never counted"
    assert any(c.sync.spec < c.controller < c.raw for c in valued), "the default policies never limited"
    unset = results["unset"]
    assert any(c.raw < c.sync.spec == c.controller for c in unset), "the flag's window never held a scale-down"
    assert any(c.raw < c.controller < c.sync.spec for c in unset), "the scale-down policy never limited"


@pytest.mark.redis
def test_a_queues_backlog_in_the_store_scales_a_deployment_through_the_hpa(serve_metrics, store, k8s_client,
                                                                          k8s_namespace):
    """The production source: pending + scheduled + running jobs of the queue, read through the
    store, served to the real HPA; the Deployment follows ceil(backlog / per_replica)."""
    server = serve_metrics(store_backlog_source(store.backlog, queues={"prep"}))
    jobs = store.submit([Job(id=0, spec=JobSpec(command=["true"]), queue="prep") for _ in range(23)])
    store.submit([Job(id=0, spec=JobSpec(command=["true"]), queue="other") for _ in range(50)])
    running = jobs[0]
    store.transition(running.id, JobState.SCHEDULED, bump_attempt=True)
    store.transition(running.id, JobState.RUNNING, attempt=1)
    apps = client.AppsV1Api(k8s_client)
    apps.create_namespaced_deployment(k8s_namespace, deployment("prep"))
    client.AutoscalingV2Api(k8s_client).create_namespaced_horizontal_pod_autoscaler(
        k8s_namespace, hpa("prep", min_replicas=1, max_replicas=10, behavior=None))

    def ready_replicas() -> int:
        return apps.read_namespaced_deployment("prep", k8s_namespace).status.ready_replicas or 0

    wait_for("3 ready replicas for a backlog of 23", lambda: ready_replicas() == 3, 60)
    assert {s.value for s in server.served if s.labels.get(QUEUE_LABEL) == "prep"} == {23.0}

    for job in jobs[1:14]:
        store.cancel(job.id)
    wait_for("1 replica for a backlog of 10, after the downscale stabilization", lambda: ready_replicas() == 1, 60)
    assert [s.value for s in server.served if s.labels.get(QUEUE_LABEL) == "prep"][-1] == 10.0
