#!/usr/bin/env bash
# Run every test: install crossdock, start the local Slurm cluster and the Kubernetes control
# plane the integration tests use, run pytest (in parallel, see below), stop what was started.
# Extra args go to one plain pytest run instead.
set -uo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh || exit 1
# What only the tests need, from Debian: compose (the compose file's check), Redis Sentinel (the
# failover test), Prometheus (it scrapes crossdock; the services' traffic source) and Chromium (the
# dashboard's browser test). Each test starts its own server on loopback.
need_apt=()
command -v docker-compose >/dev/null || docker compose version >/dev/null 2>&1 || need_apt+=(docker-compose)
command -v redis-sentinel >/dev/null || need_apt+=(redis-sentinel)
command -v prometheus >/dev/null || need_apt+=(prometheus)
command -v chromium >/dev/null || need_apt+=(chromium)
# The real node of the Kubernetes plane (test_k8s_realnode.py: crossdock.dev.k8s.realnode): containerd,
# runc and the CNI plugins run its pods; mmdebstrap and busybox-static build its images.
command -v containerd >/dev/null || need_apt+=(containerd)
command -v runc >/dev/null || need_apt+=(runc)
[ -x /usr/lib/cni/bridge ] || need_apt+=(containernetworking-plugins)
command -v mmdebstrap >/dev/null || need_apt+=(mmdebstrap)
[ -x /bin/busybox ] && ! ldd /bin/busybox >/dev/null 2>&1 || need_apt+=(busybox-static)
if ((${#need_apt[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null \
    || { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null; } \
    || { echo "installing ${need_apt[*]} failed" >&2; exit 1; }
  # Debian's prometheus package enables a server on every address; the tests start their own
  if [[ " ${need_apt[*]} " == *" prometheus "* ]] && command -v systemctl >/dev/null; then
    systemctl disable --now prometheus >/dev/null 2>&1 || true
  fi
  # likewise Debian's containerd service: the real node runs its own, on its own socket
  if [[ " ${need_apt[*]} " == *" containerd "* ]] && command -v systemctl >/dev/null; then
    systemctl disable --now containerd >/dev/null 2>&1 || true
  fi
fi
py=.venv/bin/python
export CROSSDOCK_STATE_DIR="${CROSSDOCK_STATE_DIR:-$(pwd)/.state}"

cleanup() {
  $py -m crossdock.dev.slurm down >/dev/null 2>&1 || true
  $py -m crossdock.dev.k8s node down >/dev/null 2>&1 || true  # a real node a failed test left behind
  $py -m crossdock.dev.k8s down >/dev/null 2>&1 || true
}
trap cleanup EXIT

$py -m crossdock.dev.slurm up || { echo "local Slurm cluster failed to start" >&2; exit 1; }
# Kubernetes binaries (and Karpenter, for the node-pool tests; the upstream descheduler, for the
# descheduler's comparison; the kubelet, for the real node) are built from the pinned upstream
# modules once (about 9 + 4 + 5 + 3 minutes cold on 2 idle cores) and cached in ~/.cache/crossdock/k8s; later
# runs reuse them. `up` starts Karpenter beside the plane.
$py -m crossdock.dev.k8s build || { echo "building the Kubernetes control plane failed" >&2; exit 1; }
# The real node's kubelet and images (an mmdebstrap root with Python, 1.5-4 minutes the first time).
$py -m crossdock.dev.k8s node build || { echo "building the real node failed" >&2; exit 1; }
# helm for the chart test (deploy/helm/crossdock), built from its Go module once and cached the same way.
bash scripts/helm/build.sh >/dev/null || { echo "building helm failed" >&2; exit 1; }
$py -m crossdock.dev.k8s up || { echo "local Kubernetes control plane failed to start" >&2; exit 1; }
if (($#)); then  # the caller's selection and options, as given (add -n 4 --dist loadgroup to spread it)
  $py -m pytest -q -p no:cacheprovider "$@"
  exit
fi
# The whole suite: on CROSSDOCK_TEST_WORKERS xdist workers (most integration tests wait on polls
# and services, so 4 on 2 cores); the tests sharing the Slurm cluster, the Kubernetes plane or the
# chaos run each stay on one worker, one at a time (tests/parallel.py). Then any marked serial
# (a test that needs the machine to itself; none asserts on wall time), alone.
# The slowest tests, for keeping CI within its time; every test's time in .state/test-times.tsv.
CROSSDOCK_TEST_TIMES="${CROSSDOCK_TEST_TIMES:-$CROSSDOCK_STATE_DIR/test-times.tsv}" \
  $py -m pytest -q -p no:cacheprovider -n "${CROSSDOCK_TEST_WORKERS:-4}" --dist loadgroup -m "not serial" \
  --durations=25
parallel=$?
$py -m pytest -q -p no:cacheprovider -m serial
alone=$?
((alone == 5)) && alone=0  # no test marked serial
((parallel)) && exit "$parallel"
exit "$alone"
