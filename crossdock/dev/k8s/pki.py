"""Certificates and kubeconfigs: a CA, serving and client certificates made with openssl, the
service-account key pair, and one kubeconfig per client identity.

The openssl extension files and the kubeconfigs are rendered by pure functions
(``ca_extensions``, ``leaf_extensions``, ``render_kubeconfig``); the rest runs openssl.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

import yaml

from crossdock.dev.k8s.components import SERVICE_IP
from crossdock.dev.k8s.errors import ControlPlaneError

# Client identities: (file name, subject). RBAC's bootstrap roles bind the two
# system:kube-* users; the admin and kwok are system:masters.
CLIENTS = (
    ("admin", "/O=system:masters/CN=crossdock-admin"),
    ("kube-controller-manager", "/CN=system:kube-controller-manager"),
    ("kube-scheduler", "/CN=system:kube-scheduler"),
    ("kwok", "/O=system:masters/CN=kwok-controller"),
)

# Every name the API server answers to, from the host and from pods.
APISERVER_SANS = ("IP:127.0.0.1", f"IP:{SERVICE_IP}", "DNS:localhost", "DNS:kubernetes",
                  "DNS:kubernetes.default", "DNS:kubernetes.default.svc",
                  "DNS:kubernetes.default.svc.cluster.local")

PKI_LAYOUT = "2"  # bump when the set of files changes: older directories are regenerated


def ca_extensions() -> str:
    """The openssl config of a CA certificate (section ``ca``)."""
    return (
        "[req]\ndistinguished_name = dn\n[dn]\n[ca]\n"
        "basicConstraints = critical,CA:TRUE\n"
        "keyUsage = critical,keyCertSign,cRLSign,digitalSignature\n"
        "subjectKeyIdentifier = hash\n"
    )


def leaf_extensions(usage: str, sans: Sequence[str] = ()) -> str:
    """The openssl config of a leaf certificate (section ``leaf``) for ``usage``
    (``serverAuth``/``clientAuth``) and the subject alternative names ``sans``."""
    lines = [
        "[req]", "distinguished_name = dn", "[dn]",
        "[leaf]", "basicConstraints = critical,CA:FALSE",
        "keyUsage = critical,digitalSignature,keyEncipherment",
        f"extendedKeyUsage = {usage}",
        "authorityKeyIdentifier = keyid",
    ]
    if sans:
        lines.append("subjectAltName = " + ",".join(sans))
    return "\n".join(lines) + "\n"


def render_kubeconfig(server: str, pki: Path, user: str) -> str:
    """A kubeconfig for ``user`` (its certificate in ``pki``) on ``server``."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "crossdock-local",
                      "cluster": {"server": server, "certificate-authority": str(pki / "ca.crt")}}],
        "users": [{"name": user, "user": {"client-certificate": str(pki / f"{user}.crt"),
                                          "client-key": str(pki / f"{user}.key")}}],
        "contexts": [{"name": "crossdock-local", "context": {"cluster": "crossdock-local", "user": user}}],
        "current-context": "crossdock-local",
    }
    return yaml.safe_dump(config, sort_keys=False)


def write_kubeconfig(path: Path, server: str, pki: Path, user: str) -> None:
    tmp = path.with_suffix(".tmp")
    tmp.write_text(render_kubeconfig(server, pki, user))
    tmp.chmod(0o600)
    tmp.replace(path)


def _openssl(*args: str) -> None:
    proc = subprocess.run(["openssl", *args], capture_output=True, text=True)
    if proc.returncode != 0:
        raise ControlPlaneError(f"openssl {args[0]} failed: {proc.stderr.strip()}")


def _ec_key(path: Path) -> None:
    _openssl("genpkey", "-algorithm", "EC", "-pkeyopt", "ec_paramgen_curve:P-256", "-out", str(path))
    path.chmod(0o600)


def _ca_cert(pki: Path, name: str, subject: str) -> None:
    cnf = pki / f"{name}.cnf"
    cnf.write_text(ca_extensions())
    _ec_key(pki / f"{name}.key")
    _openssl("req", "-x509", "-new", "-key", str(pki / f"{name}.key"), "-subj", subject,
             "-days", "3650", "-sha256", "-config", str(cnf), "-extensions", "ca",
             "-set_serial", "0x" + os.urandom(16).hex(), "-out", str(pki / f"{name}.crt"))
    cnf.unlink()


def _leaf_cert(pki: Path, name: str, subject: str, usage: str, sans: Sequence[str] = (),
               ca: str = "ca") -> None:
    key, csr, crt, ext = (pki / f"{name}.{s}" for s in ("key", "csr", "crt", "ext"))
    _ec_key(key)
    ext.write_text(leaf_extensions(usage, sans))
    _openssl("req", "-new", "-key", str(key), "-subj", subject, "-config", str(ext), "-out", str(csr))
    _openssl("x509", "-req", "-in", str(csr), "-CA", str(pki / f"{ca}.crt"), "-CAkey", str(pki / f"{ca}.key"),
             "-set_serial", "0x" + os.urandom(16).hex(), "-days", "3650", "-sha256",
             "-extfile", str(ext), "-extensions", "leaf", "-out", str(crt))
    csr.unlink()
    ext.unlink()


def ensure_pki(pki: Path) -> None:
    """CA, serving and client certificates and the service-account key pair (kept across restarts)."""
    marker = pki / "complete"
    if marker.is_file() and marker.read_text() == PKI_LAYOUT:
        return
    if pki.exists():
        shutil.rmtree(pki)
    pki.mkdir(parents=True)
    pki.chmod(0o700)
    _ca_cert(pki, "ca", "/CN=crossdock-local-ca")
    # The aggregation layer's front proxy has its own CA, as in kubeadm.
    _ca_cert(pki, "front-proxy-ca", "/CN=crossdock-front-proxy-ca")
    _leaf_cert(pki, "front-proxy-client", "/CN=front-proxy-client", "clientAuth", ca="front-proxy-ca")
    _leaf_cert(pki, "apiserver", "/CN=kube-apiserver", "serverAuth", APISERVER_SANS)
    for name, subject in CLIENTS:
        _leaf_cert(pki, name, subject, "clientAuth")
    _ec_key(pki / "sa.key")
    _openssl("pkey", "-in", str(pki / "sa.key"), "-pubout", "-out", str(pki / "sa.pub"))
    marker.write_text(PKI_LAYOUT)
