"""Each component's command-line flags and kwok's configuration, as pure functions of the
ports, the certificate directory and the config directory ``up`` chose."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from crossdock.dev.k8s.stages import POD_STAGES

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
POD_CIDR = "10.244.0.0/16"
SA_ISSUER = "https://kubernetes.default.svc.cluster.local"

HPA_SYNC_PERIOD_SECONDS = 1
"""The HPA controller's sync period on the dev plane (upstream's default is 15 s): tests that
compare crossdock's HPA arithmetic with the real controller's see one decision a second."""
HPA_DOWNSCALE_STABILIZATION_SECONDS = 5
"""The downscale stabilization window (upstream: 5 min) of HPAs without ``behavior``, and of
those whose ``behavior.scaleDown`` leaves ``stabilizationWindowSeconds`` unset."""

PORTS = ("etcd-client", "etcd-peer", "kube-apiserver", "kube-controller-manager", "kube-scheduler")
"""The loopback ports ``up`` picks, by name."""


def etcd_url(ports: Mapping[str, int]) -> str:
    return f"http://127.0.0.1:{ports['etcd-client']}"


def etcd_args(data_dir: Path, ports: Mapping[str, int]) -> list[str]:
    client_url = etcd_url(ports)
    peer_url = f"http://127.0.0.1:{ports['etcd-peer']}"
    return [
        "--name=crossdock", f"--data-dir={data_dir}",
        f"--listen-client-urls={client_url}", f"--advertise-client-urls={client_url}",
        f"--listen-peer-urls={peer_url}", f"--initial-advertise-peer-urls={peer_url}",
        f"--initial-cluster=crossdock={peer_url}", "--unsafe-no-fsync=true", "--log-level=warn",
    ]


def apiserver_args(ports: Mapping[str, int], pki: Path) -> list[str]:
    return [
        f"--etcd-servers={etcd_url(ports)}",
        "--bind-address=127.0.0.1", "--advertise-address=127.0.0.1",
        f"--secure-port={ports['kube-apiserver']}",
        f"--tls-cert-file={pki / 'apiserver.crt'}", f"--tls-private-key-file={pki / 'apiserver.key'}",
        f"--client-ca-file={pki / 'ca.crt'}",
        f"--service-account-issuer={SA_ISSUER}",
        f"--service-account-key-file={pki / 'sa.pub'}",
        f"--service-account-signing-key-file={pki / 'sa.key'}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=Node,RBAC",
        f"--requestheader-client-ca-file={pki / 'front-proxy-ca.crt'}",
        "--requestheader-allowed-names=front-proxy-client",
        "--requestheader-username-headers=X-Remote-User",
        "--requestheader-group-headers=X-Remote-Group",
        "--requestheader-extra-headers-prefix=X-Remote-Extra-",
        f"--proxy-client-cert-file={pki / 'front-proxy-client.crt'}",
        f"--proxy-client-key-file={pki / 'front-proxy-client.key'}",
        "--endpoint-reconciler-type=none",
        "--allow-privileged=true",
        "--profiling=false",
        # Drain watches for at most 2 s on SIGTERM; otherwise connected clients keep the
        # server in graceful shutdown for --request-timeout (60 s).
        "--shutdown-watch-termination-grace-period=2s",
    ]


def controller_args(name: str, ports: Mapping[str, int], pki: Path, conf: Path) -> list[str]:
    """Flags of kube-controller-manager or kube-scheduler (``name``)."""
    kubeconfig = conf / f"{name}.kubeconfig"
    extra = [] if name == "kube-scheduler" else [
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki / 'sa.key'}",
        f"--root-ca-file={pki / 'ca.crt'}",
        # External metrics reach the HPA controller through the apiserver's aggregation layer
        # (an APIService whose Service is an ExternalName for localhost), so no extra flag is
        # needed for them; only the controller's clock is shortened.
        f"--horizontal-pod-autoscaler-sync-period={HPA_SYNC_PERIOD_SECONDS}s",
        f"--horizontal-pod-autoscaler-downscale-stabilization={HPA_DOWNSCALE_STABILIZATION_SECONDS}s",
    ]
    return [
        f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        "--bind-address=127.0.0.1", f"--secure-port={ports[name]}", "--leader-elect=false",
        *extra,
    ]


def kwok_args(conf: Path) -> list[str]:
    return [
        f"--kubeconfig={conf / 'kwok.kubeconfig'}", f"--config={conf / 'kwok.yaml'}",
        "--manage-all-nodes=true", f"--cidr={POD_CIDR}",
        # Renew a Lease per node, as the kubelet does; without it the node lifecycle
        # controller would mark the nodes unreachable and evict their pods.
        "--node-lease-duration-seconds=40",
    ]


def render_kwok_config(upstream_stages: Iterable[str]) -> str:
    """kwok's configuration: the upstream Stage files' documents (texts, in order), then
    crossdock's ``POD_STAGES``."""
    docs: list[Any] = [doc for text in upstream_stages for doc in yaml.safe_load_all(text) if doc]
    return yaml.safe_dump_all(docs + list(POD_STAGES), sort_keys=False)
