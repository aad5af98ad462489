"""Talking to the plane over HTTP(S): a minimal API client, health and readiness checks."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crossdock.dev.k8s.errors import ControlPlaneError
from crossdock.dev.proc import wait_until


class Api:
    """A minimal HTTPS client holding the admin certificate (no Kubernetes client needed)."""

    def __init__(self, server: str, pki: Path) -> None:
        self.server = server
        self.ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
        self.ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))

    def request(self, method: str, path: str, body: Any = None, timeout: float = 10.0) -> tuple[int, Any]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.server + path, data=data, method=method,
                                     headers={"Content-Type": "application/json",
                                              "Accept": "application/json"})
        try:
            with urllib.request.urlopen(req, context=self.ctx, timeout=timeout) as resp:
                raw = resp.read()
                code = resp.status
        except urllib.error.HTTPError as err:
            raw = err.read()
            code = err.code
        try:
            return code, json.loads(raw) if raw else None
        except ValueError:
            return code, raw.decode(errors="replace")

    def ready(self) -> bool:
        try:
            code, _ = self.request("GET", "/readyz", timeout=3.0)
        except (OSError, ssl.SSLError):
            return False
        return code == 200


def wait(what: str, predicate: Callable[[], object], timeout: float, check: Callable[[], None] | None = None,
         interval: float = 0.25) -> None:
    """Poll until ``predicate``; ``check`` (a component died) may raise first."""
    if not wait_until(predicate, timeout, interval=interval, check=check):
        raise ControlPlaneError(f"timed out after {timeout:.0f}s waiting for {what}")


def etcd_healthy(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2.0) as resp:
            return bool(json.loads(resp.read()).get("health") == "true")
    except (OSError, ValueError):
        return False


def nodes_ready(api: Api, expected: set[str]) -> bool:
    code, body = api.request("GET", "/api/v1/nodes")
    if code != 200:
        return False
    ready = set()
    for node in body.get("items", []):
        conditions = {c["type"]: c["status"] for c in (node.get("status") or {}).get("conditions") or []}
        taints = {t["key"] for t in node.get("spec", {}).get("taints", []) or []}
        if conditions.get("Ready") == "True" and not any(t.startswith("node.kubernetes.io/") for t in taints):
            ready.add(node["metadata"]["name"])
    return expected <= ready
