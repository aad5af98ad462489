"""The local control plane's rendered files and flags: openssl extensions, kubeconfigs,
component command lines, kwok's config (no process started, no openssl run)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from crossdock.dev.k8s import POD_STAGES, components, pki

PKI = Path("/state/pki")
CONF = Path("/state/conf")
PORTS = {name: 30000 + i for i, name in enumerate(components.PORTS)}


def test_ca_extensions_make_a_signing_ca():
    text = pki.ca_extensions()
    assert "[ca]\n" in text and "basicConstraints = critical,CA:TRUE\n" in text
    assert "keyCertSign" in text


@pytest.mark.parametrize("usage,sans", [("clientAuth", ()), ("serverAuth", pki.APISERVER_SANS)],
                         ids=["client", "apiserver"])
def test_leaf_extensions(usage, sans):
    lines = pki.leaf_extensions(usage, sans).splitlines()
    assert "[leaf]" in lines and "basicConstraints = critical,CA:FALSE" in lines
    assert f"extendedKeyUsage = {usage}" in lines
    san = [line for line in lines if line.startswith("subjectAltName")]
    assert san == ([f"subjectAltName = {','.join(sans)}"] if sans else [])


def test_the_apiserver_certificate_names_the_service_ip():
    assert f"IP:{components.SERVICE_IP}" in pki.APISERVER_SANS and "IP:127.0.0.1" in pki.APISERVER_SANS


@pytest.mark.parametrize("user", [name for name, _ in pki.CLIENTS])
def test_kubeconfig_uses_the_users_certificate(user):
    config = yaml.safe_load(pki.render_kubeconfig("https://127.0.0.1:6443", PKI, user))
    assert config["current-context"] == "crossdock-local"
    assert config["clusters"][0]["cluster"] == {"server": "https://127.0.0.1:6443",
                                               "certificate-authority": "/state/pki/ca.crt"}
    assert config["users"] == [{"name": user, "user": {"client-certificate": f"/state/pki/{user}.crt",
                                                       "client-key": f"/state/pki/{user}.key"}}]


def flags(args: list[str]) -> dict[str, str]:
    out = dict(arg.removeprefix("--").split("=", 1) for arg in args)
    assert len(out) == len(args), f"a flag is given twice: {args}"
    return out


def test_etcd_listens_on_its_two_ports():
    got = flags(components.etcd_args(Path("/state/etcd"), PORTS))
    assert got["data-dir"] == "/state/etcd"
    assert got["listen-client-urls"] == got["advertise-client-urls"] == "http://127.0.0.1:30000"
    assert got["initial-cluster"] == "crossdock=http://127.0.0.1:30001"


def test_apiserver_flags():
    got = flags(components.apiserver_args(PORTS, PKI))
    assert got["etcd-servers"] == "http://127.0.0.1:30000" and got["secure-port"] == "30002"
    assert got["service-cluster-ip-range"] == components.SERVICE_CIDR
    assert got["tls-cert-file"] == "/state/pki/apiserver.crt"
    assert got["authorization-mode"] == "Node,RBAC"


@pytest.mark.parametrize("name,signs", [("kube-controller-manager", True), ("kube-scheduler", False)])
def test_controller_flags(name, signs):
    got = flags(components.controller_args(name, PORTS, PKI, CONF))
    assert got["kubeconfig"] == got["authentication-kubeconfig"] == f"/state/conf/{name}.kubeconfig"
    assert got["secure-port"] == str(PORTS[name]) and got["leader-elect"] == "false"
    assert ("service-account-private-key-file" in got) == signs
    assert ("horizontal-pod-autoscaler-sync-period" in got) == signs


def test_the_hpa_controller_runs_on_a_short_clock():
    got = flags(components.controller_args("kube-controller-manager", PORTS, PKI, CONF))
    assert got["horizontal-pod-autoscaler-sync-period"] == f"{components.HPA_SYNC_PERIOD_SECONDS}s"
    assert (got["horizontal-pod-autoscaler-downscale-stabilization"]
            == f"{components.HPA_DOWNSCALE_STABILIZATION_SECONDS}s")


def test_kwok_flags():
    got = flags(components.kwok_args(CONF))
    assert got["config"] == "/state/conf/kwok.yaml" and got["cidr"] == components.POD_CIDR


def test_kwok_config_keeps_upstream_stages_first_then_crossdocks():
    upstream = ["kind: Stage\nmetadata: {name: a}\n---\n---\nkind: Stage\nmetadata: {name: b}\n",
                "kind: Stage\nmetadata: {name: c}\n"]
    docs = list(yaml.safe_load_all(components.render_kwok_config(upstream)))
    names = [d["metadata"]["name"] for d in docs]
    assert names == ["a", "b", "c", *(s["metadata"]["name"] for s in POD_STAGES)]
    assert docs[3:] == list(POD_STAGES)
