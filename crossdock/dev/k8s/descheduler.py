"""The upstream descheduler (``sigs.k8s.io/descheduler``, pinned in ``scripts/k8s/versions.env`` and
built by ``build.sh`` beside the plane's binaries), run once against the plane: the baseline of
``bench/bench_descheduler.py``.

``run_once(policy, kubeconfig)`` writes a ``descheduler/v1alpha2`` DeschedulerPolicy and runs
``descheduler --descheduling-interval=0`` (one pass, then exit) with its HTTPS server off
(``--secure-port=0``: nothing listens), and returns the pods it evicted as its log names them.
``high_node_utilization`` is the compaction policy on ``nvidia.com/gpu``.

HighNodeUtilization only compacts when kube-scheduler scores with ``MostAllocated`` (upstream's
documented requirement); the plane's scheduler keeps the default ``LeastAllocated``.
``most_allocated_scheduler()`` runs a second kube-scheduler of the pinned release against the plane
with one profile, :data:`MOST_ALLOCATED`, that scores ``NodeResourcesFit`` by ``MostAllocated`` on
``nvidia.com/gpu``, cpu and memory and nothing that spreads; pods opt in with ``schedulerName``. It binds 127.0.0.1 only,
has leader election off and is stopped when the context ends.
"""

from __future__ import annotations

import contextlib
import os
import re
import ssl
import subprocess
import tempfile
import urllib.request
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from crossdock.dev.k8s.api import wait
from crossdock.dev.k8s.build import bin_dir, versions
from crossdock.dev.k8s.errors import ControlPlaneError, MissingBinariesError
from crossdock.dev.proc import free_port

NAME = "descheduler"
MOST_ALLOCATED = "crossdock-most-allocated"
"""The ``schedulerName`` of the second kube-scheduler's one profile."""
GPU = "nvidia.com/gpu"

_EVICTED = re.compile(r'"Evicted pod" pod="(?P<pod>[^"]+)"')


def exe() -> Path:
    path = bin_dir() / NAME
    stamp = bin_dir() / f"{NAME}.version"
    wanted = versions()["DESCHEDULER_VERSION"]
    if not os.access(path, os.X_OK) or not stamp.is_file() or stamp.read_text().strip() != wanted:
        raise MissingBinariesError(f"missing descheduler {wanted} in {bin_dir()}; run: python -m crossdock.dev.k8s build")
    return path


def high_node_utilization(thresholds: Mapping[str, float] | None = None, *, pod_labels: Mapping[str, str] | None = None,
                          node_selector: str | None = None, priority_threshold: int | None = None,
                          node_fit: bool = True, max_total: int | None = None) -> dict[str, Any]:
    """A DeschedulerPolicy with one profile: HighNodeUtilization (default: nodes under 80 % of their
    ``nvidia.com/gpu`` are emptied), evicting only pods that request a thresholded resource and carry
    ``pod_labels`` (DefaultEvictor's ``labelSelector``; HighNodeUtilization itself can only exclude
    namespaces), on the nodes ``node_selector`` picks, below ``priority_threshold``, with
    DefaultEvictor's ``nodeFit``."""
    evictor: dict[str, Any] = {"nodeFit": node_fit}
    if priority_threshold is not None:
        evictor["priorityThreshold"] = {"value": priority_threshold}
    if pod_labels:
        evictor["labelSelector"] = {"matchLabels": dict(pod_labels)}
    hnu: dict[str, Any] = {"thresholds": dict(thresholds or {GPU: 80}),
                           "evictionModes": ["OnlyThresholdingResources"]}
    policy: dict[str, Any] = {
        "apiVersion": "descheduler/v1alpha2", "kind": "DeschedulerPolicy",
        "profiles": [{"name": "gpu-compaction",
                      "pluginConfig": [{"name": "DefaultEvictor", "args": evictor},
                                       {"name": "HighNodeUtilization", "args": hnu}],
                      "plugins": {"balance": {"enabled": ["HighNodeUtilization"]}}}],
    }
    if node_selector:
        policy["nodeSelector"] = node_selector
    if max_total is not None:
        policy["maxNoOfPodsToEvictTotal"] = max_total
    return policy


@dataclass(frozen=True)
class Run:
    evicted: tuple[str, ...]
    """``namespace/name`` of every pod it evicted, in order."""
    returncode: int
    log: str


def run_once(policy: Mapping[str, Any], kubeconfig: str | os.PathLike[str], *, dry_run: bool = False,
             timeout: float = 180.0, verbosity: int = 2) -> Run:
    """One descheduling pass of the upstream descheduler; raises when it fails."""
    with tempfile.TemporaryDirectory(prefix="crossdock-descheduler-") as tmp:
        path = Path(tmp) / "policy.yaml"
        path.write_text(yaml.safe_dump(dict(policy), sort_keys=False))
        argv = [str(exe()), f"--kubeconfig={kubeconfig}", f"--policy-config-file={path}",
                "--descheduling-interval=0", "--secure-port=0", "--disable-metrics", f"--v={verbosity}"]
        if dry_run:
            argv.append("--dry-run")
        try:
            done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=tmp, check=False)
        except subprocess.TimeoutExpired as err:
            raise ControlPlaneError(f"descheduler did not finish one pass within {timeout:.0f}s") from err
    log = done.stdout + done.stderr
    if done.returncode != 0:
        raise ControlPlaneError(f"descheduler exited {done.returncode}: {log[-2000:]}")
    return Run(tuple(m["pod"] for m in _EVICTED.finditer(log)), done.returncode, log)


def scheduler_config(kubeconfig: str | os.PathLike[str]) -> dict[str, Any]:
    resources = [{"name": GPU, "weight": 5}, {"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}]
    return {
        "apiVersion": "kubescheduler.config.k8s.io/v1", "kind": "KubeSchedulerConfiguration",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "leaderElection": {"leaderElect": False},
        # bin packing alone: the default profile's spreading scores (PodTopologySpread's system
        # defaults spread a ReplicaSet's pods over hostnames; BalancedAllocation) would send the
        # evicted pods back to the emptied node
        "profiles": [{"schedulerName": MOST_ALLOCATED,
                      "plugins": {"score": {"disabled": [{"name": "PodTopologySpread"},
                                                         {"name": "NodeResourcesBalancedAllocation"}]}},
                      "pluginConfig": [{"name": "NodeResourcesFit",
                                        "args": {"scoringStrategy": {"type": "MostAllocated", "resources": resources}}}]}],
    }


@contextlib.contextmanager
def most_allocated_scheduler(kubeconfig: str | os.PathLike[str], timeout: float = 60.0) -> Iterator[str]:
    """A second kube-scheduler (profile :data:`MOST_ALLOCATED`) against the plane while the context
    lasts; yields its ``schedulerName``."""
    binary = bin_dir() / "kube-scheduler"
    if not os.access(binary, os.X_OK):
        raise MissingBinariesError(f"missing kube-scheduler in {bin_dir()}; run: python -m crossdock.dev.k8s build")
    with tempfile.TemporaryDirectory(prefix="crossdock-most-allocated-") as tmp:
        config = Path(tmp) / "config.yaml"
        config.write_text(yaml.safe_dump(scheduler_config(kubeconfig), sort_keys=False))
        port = free_port()
        log = open(Path(tmp) / "log", "wb")  # noqa: SIM115 - closed below
        proc = subprocess.Popen([str(binary), f"--config={config}", "--bind-address=127.0.0.1",
                                 f"--secure-port={port}", f"--authentication-kubeconfig={kubeconfig}",
                                 f"--authorization-kubeconfig={kubeconfig}"],
                                stdout=log, stderr=subprocess.STDOUT, cwd=tmp)
        try:
            ctx = ssl.create_default_context()
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE

            def healthy() -> bool:
                if proc.poll() is not None:
                    raise ControlPlaneError(f"kube-scheduler ({MOST_ALLOCATED}) exited {proc.returncode}: "
                                            f"{(Path(tmp) / 'log').read_text(errors='replace')[-2000:]}")
                try:
                    with urllib.request.urlopen(f"https://127.0.0.1:{port}/healthz", timeout=2, context=ctx) as r:
                        return r.status == 200
                except OSError:
                    return False

            wait(f"kube-scheduler {MOST_ALLOCATED} /healthz", healthy, timeout)
            yield MOST_ALLOCATED
        finally:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            log.close()
