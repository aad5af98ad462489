"""A real, local Kubernetes control plane for development and CI.

Upstream etcd, kube-apiserver, kube-controller-manager and kube-scheduler run on
loopback beside kwok, which plays the kubelet for fake GPU nodes: it marks the
Nodes Ready, renews their leases and moves bound Pods through their lifecycle.
Nothing here is a mock: Jobs make Pods through the Job controller, Pods bind
through kube-scheduler (filters, taints, preemption), and the API is the real
one, admission and RBAC included.

Binaries are built from upstream Go modules at the releases pinned in
``scripts/k8s/versions.env`` (see ``scripts/k8s/build.sh``) and cached outside
the repository in ``${CROSSDOCK_CACHE:-~/.cache/crossdock}/k8s/<version>/bin``.

From Python::

    from crossdock.dev import k8s
    kubeconfig = k8s.up()          # idempotent; returns the admin kubeconfig path
    ...
    k8s.down()

    with k8s.session() as kubeconfig:   # shared by concurrent users; the last one stops it
        ...

Tests use the fixtures of ``tests/integration/kubernetes/conftest.py``
(``k8s_kubeconfig``, ``k8s_client``, ``k8s_namespace``).

From a shell::

    python -m crossdock.dev.k8s build      # once: builds and caches the binaries
    python -m crossdock.dev.k8s up         # prints the kubeconfig path
    export KUBECONFIG="$(python -m crossdock.dev.k8s kubeconfig)"
    python -m crossdock.dev.k8s status
    python -m crossdock.dev.k8s down

Pod lifecycle on the fake nodes (kwok Stages, see ``POD_STAGES``): a bound Pod
becomes Running at once; with the annotation ``crossdock.io/run-seconds`` it
terminates after that many seconds with the exit code in
``crossdock.io/exit-code`` (default 0; 0 gives phase Succeeded, anything else
Failed, with the code in ``containerStatuses[].state.terminated.exitCode``);
with only ``crossdock.io/exit-code`` it terminates at once; with neither it runs
until deleted. Use ``restartPolicy: Never`` for these pods: kwok does not restart
containers.

The controller-manager syncs HPAs every second and stabilizes scale-downs over 5 s
(``components.HPA_SYNC_PERIOD_SECONDS``, ``HPA_DOWNSCALE_STABILIZATION_SECONDS``; upstream's
defaults are 15 s and 5 min). External metrics reach it through the aggregation layer: an
APIService whose Service is an ExternalName for ``localhost`` (see
``crossdock.backends.kubernetes.external_metrics``).

Karpenter (its kwok cloud provider) runs beside the plane, started by ``up`` after it and
recorded apart (``addons`` in state.json): see ``karpenter``.

The upstream descheduler (``sigs.k8s.io/descheduler``) is built beside them and run once on
demand, never by ``up``: see ``descheduler``; ``fragmented`` builds the fragmented GPU pools its
comparison with crossdock's descheduler starts from.

Modules: ``build`` (pinned releases, cache, build.sh), ``karpenter`` (Karpenter's CRDs, instance
types and process), ``descheduler`` (the upstream descheduler, a MostAllocated kube-scheduler),
``fragmented`` (fragmented GPU pools for crossdock and upstream), ``pki`` (certificates, kubeconfigs),
``components`` (each component's flags, kwok's config), ``nodes`` and ``stages`` (fake nodes
and their pod lifecycle), ``state`` (state directory, lock, state.json), ``processes``
(start, identify, stop by PID), ``api`` (HTTPS client, readiness), ``controlplane`` (up,
down, status, restart, sessions), ``realnode`` and ``image`` (one real node: the plane's kubelet
with Debian's containerd and runc, images built from Debian packages; ``python -m
crossdock.dev.k8s node up|down``), ``cli`` (the command line).
"""

from crossdock.dev.k8s.build import BINARIES, COMPONENTS, bin_dir, build, cache_root, versions
from crossdock.dev.k8s.build import missing_binaries as _missing_binaries
from crossdock.dev.k8s.cli import app, main
from crossdock.dev.k8s.components import POD_CIDR, SA_ISSUER, SERVICE_CIDR, SERVICE_IP
from crossdock.dev.k8s.controlplane import ControlPlaneStatus, down, restart_component, session, status, up
from crossdock.dev.k8s.errors import ControlPlaneError, MissingBinariesError
from crossdock.dev.k8s.nodes import DEFAULT_POOLS, GPU_RESOURCE, LABEL_GPU_PRODUCT, LABEL_POOL, NodePool
from crossdock.dev.k8s.stages import ANNOTATION_EXIT_CODE, ANNOTATION_RUN_SECONDS, POD_STAGES
from crossdock.dev.k8s.state import default_state_dir, kubeconfig_path

__all__ = [
    "ANNOTATION_EXIT_CODE",
    "ANNOTATION_RUN_SECONDS",
    "DEFAULT_POOLS",
    "ControlPlaneError",
    "ControlPlaneStatus",
    "MissingBinariesError",
    "NodePool",
    "app",
    "bin_dir",
    "build",
    "default_state_dir",
    "down",
    "kubeconfig_path",
    "main",
    "restart_component",
    "session",
    "status",
    "up",
    "versions",
]
