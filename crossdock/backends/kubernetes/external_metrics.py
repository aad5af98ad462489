"""crossdock's queue backlog as a Kubernetes external metric (``external.metrics.k8s.io/v1beta1``).

A small HTTPS server, the same kind of adapter as KEDA's metrics server: the API server's
aggregation layer forwards ``GET /apis/external.metrics.k8s.io/v1beta1/namespaces/{ns}/{metric}
?labelSelector=queue=NAME`` to it, and an HPA with an ``External`` metric scales a Deployment on
the answer. The value comes from a *value source*, a callable ``(namespace, metric, labels) ->
float | None`` (None: no such series, 404); :func:`store_backlog_source` reads the backlog of a
queue (pending + scheduled + running jobs) through the store.

It listens on loopback by default. The cluster reaches it through an APIService whose Service is
``type: ExternalName`` with ``externalName: localhost`` (:func:`service_manifest`,
:func:`apiservice_manifest`): the aggregator dials ``https://localhost:<port>`` itself, so no
cluster IP, kube-proxy or Endpoints are involved. With ``client_ca_file`` (the API server's
``--requestheader-client-ca-file``) only the aggregator's front-proxy certificate may ask.

Every answer is kept in :attr:`ExternalMetricsAdapter.served` (time, query, value): what the HPA
controller actually saw, for explaining a decision after the fact.
"""

from __future__ import annotations

import collections
import dataclasses
import http.server
import json
import logging
import math
import re
import ssl
import subprocess
import threading
import time
from collections.abc import Callable, Collection, Mapping
from datetime import datetime, timezone
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

log = logging.getLogger(__name__)

GROUP = "external.metrics.k8s.io"
VERSION = "v1beta1"
GROUP_VERSION = f"{GROUP}/{VERSION}"
APISERVICE_NAME = f"{VERSION}.{GROUP}"
BACKLOG_METRIC = "crossdock_queue_backlog"
"""Jobs pending, scheduled or running in the queue named by the selector's ``queue`` label."""
QUEUE_LABEL = "queue"
FRONT_PROXY_NAMES = ("front-proxy-client",)
"""The API server's ``--requestheader-allowed-names``, as kubeadm and the dev plane set them."""

ValueSource = Callable[[str, str, Mapping[str, str]], "float | None"]

_LIST_PATH = re.compile(rf"^/apis/{re.escape(GROUP_VERSION)}/namespaces/([a-z0-9][-a-z0-9]*)/([^/]+)$")
_EQUALITY = re.compile(r"^\s*([A-Za-z0-9][-A-Za-z0-9_./]*)\s*==?\s*([-A-Za-z0-9_.]*)\s*$")


_OPENAPI: dict[str, dict[str, Any]] = {
    "/openapi/v2": {"swagger": "2.0", "info": {"title": "crossdock external metrics", "version": VERSION},
                    "paths": {}},
    "/openapi/v3": {"paths": {}},
}


class BadQuery(ValueError):
    """A request the adapter cannot answer (400), with the reason in one line."""


@dataclasses.dataclass(frozen=True)
class Served:
    """One answer: when (``time.time()``), to what, with which value."""

    time: float
    namespace: str
    metric: str
    labels: Mapping[str, str]
    value: float


def parse_selector(text: str) -> dict[str, str]:
    """A label selector of equality requirements (``a=b,c==d``) as a dict; set-based and
    inequality requirements are refused: a queue's backlog is one series."""
    labels: dict[str, str] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        match = _EQUALITY.match(part)
        if not match or "!" in part:
            raise BadQuery(f"labelSelector: {part!r} is not supported; use equality requirements"
                           f" such as {QUEUE_LABEL}=NAME")
        labels[match.group(1)] = match.group(2)
    return labels


def format_quantity(value: float) -> str:
    """``value`` as a Kubernetes quantity: an integer as is, anything else in milli-units
    rounded up (the HPA reads ``MilliValue()``, which rounds up too)."""
    if not math.isfinite(value):
        raise ValueError(f"metric value {value!r} is not a finite number")
    if value == int(value):
        return str(int(value))
    return f"{math.ceil(value * 1000)}m"


def resource_list(metrics: Collection[str]) -> dict[str, Any]:
    """The discovery document of ``external.metrics.k8s.io/v1beta1``."""
    return {"kind": "APIResourceList", "apiVersion": "v1", "groupVersion": GROUP_VERSION,
            "resources": [{"name": name, "singularName": "", "namespaced": True,
                           "kind": "ExternalMetricValueList", "verbs": ["get"]} for name in sorted(metrics)]}


def value_list(metric: str, labels: Mapping[str, str], value: float, at: float) -> dict[str, Any]:
    """An ``ExternalMetricValueList`` with one series."""
    stamp = datetime.fromtimestamp(at, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {"kind": "ExternalMetricValueList", "apiVersion": GROUP_VERSION, "metadata": {},
            "items": [{"metricName": metric, "metricLabels": dict(labels), "timestamp": stamp,
                       "value": format_quantity(value)}]}


def status(code: int, reason: str, message: str) -> dict[str, Any]:
    """A Kubernetes ``Status`` failure, which the aggregator and clients pass on as is."""
    return {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": message, "reason": reason, "code": code}


def store_backlog_source(backlog: Callable[[], Mapping[str, int]],
                         queues: Collection[str] | None = None) -> ValueSource:
    """A value source for :data:`BACKLOG_METRIC` over ``backlog`` (e.g. ``JobStore.backlog``): the
    selector's ``queue`` label names the queue; a queue outside ``queues`` (when given) is 404,
    a known queue with no jobs is 0."""
    known = None if queues is None else frozenset(queues)

    def source(namespace: str, metric: str, labels: Mapping[str, str]) -> float | None:
        if metric != BACKLOG_METRIC:
            return None
        queue = labels.get(QUEUE_LABEL)
        if not queue:
            raise BadQuery(f"labelSelector: name the queue, e.g. {QUEUE_LABEL}=preprocessing")
        if known is not None and queue not in known:
            return None
        return float(backlog().get(queue, 0))

    return source


def self_signed_certificate(directory: Path) -> tuple[Path, Path]:
    """A serving certificate for localhost in ``directory`` (made with openssl once, then kept).
    The APIService skips verifying it (``insecureSkipTLSVerify``): it is loopback-only."""
    cert, key = directory / "external-metrics.crt", directory / "external-metrics.key"
    if cert.is_file() and key.is_file():
        return cert, key
    directory.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
         "-keyout", str(key), "-out", str(cert), "-days", "3650", "-subj", "/CN=localhost",
         "-addext", "subjectAltName=DNS:localhost,IP:127.0.0.1"],
        capture_output=True, text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"openssl could not make the adapter's certificate: {proc.stderr.strip()}")
    key.chmod(0o600)
    return cert, key


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    adapter: "ExternalMetricsAdapter"

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = self.socket.accept()
        # The TLS handshake happens in the request's thread: a slow client never blocks accept().
        return self.adapter.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False), addr

    def handle_error(self, request: Any, client_address: Any) -> None:
        log.debug("external metrics: request from %s failed", client_address, exc_info=True)


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = 30

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        log.debug("external metrics: " + format, *args)

    def _send(self, code: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        code, body = self.server.adapter.api.answer(self.path, _peer_names(self.connection))
        self._send(code, body)


def _peer_names(conn: Any) -> set[str]:
    cert = conn.getpeercert() if hasattr(conn, "getpeercert") else None
    return {value for rdn in (cert or {}).get("subject", ()) for key, value in rdn if key == "commonName"}


class ExternalMetrics:
    """The API's answers, without the server: ``answer(path, peer_names)`` gives the status code
    and JSON body of ``GET path`` and records every metric value served in :attr:`served`.

    ``allowed_names``: None accepts any client; otherwise the client certificate's common name
    must be one of them (the server has verified the certificate against its CA).
    """

    def __init__(self, source: ValueSource, metrics: Collection[str] = (BACKLOG_METRIC,),
                 allowed_names: Collection[str] | None = None, keep: int = 100_000) -> None:
        self.source = source
        self.metrics = frozenset(metrics)
        self.allowed_names = None if allowed_names is None else frozenset(allowed_names)
        self.served: collections.deque[Served] = collections.deque(maxlen=keep)
        """Every metric answer, oldest first (the last ``keep``)."""
        self._lock = threading.Lock()

    def answer(self, path: str, peer_names: Collection[str] = ()) -> tuple[int, dict[str, Any]]:
        if self.allowed_names is not None and not self.allowed_names & set(peer_names):
            return 403, status(403, "Forbidden", f"client {sorted(peer_names)} is not one of"
                                                 f" {sorted(self.allowed_names)}")
        url = urlsplit(path)
        if url.path.rstrip("/") in ("/healthz", "/readyz", "/livez"):
            return 200, {"status": "ok"}
        if url.path.rstrip("/") == f"/apis/{GROUP_VERSION}":
            return 200, resource_list(self.metrics)
        if url.path in _OPENAPI:  # the aggregator downloads them; an empty spec, not a 404 it logs as an error
            return 200, _OPENAPI[url.path]
        match = _LIST_PATH.match(url.path)
        if not match:
            return 404, status(404, "NotFound", f"{url.path}: not served here")
        namespace, metric = match.groups()
        if metric not in self.metrics:
            return 404, status(404, "NotFound", f"external metric {metric!r} is not served; one of {sorted(self.metrics)}")
        try:
            labels = parse_selector(parse_qs(url.query).get("labelSelector", [""])[0])
            value = self.source(namespace, metric, labels)
        except BadQuery as exc:
            return 400, status(400, "BadRequest", str(exc))
        except Exception as exc:  # noqa: BLE001 - a failing source is a 500 for the HPA, not a dead thread
            log.warning("external metrics: %s %s: the value source failed: %s", namespace, metric, exc)
            return 500, status(500, "InternalError", f"reading {metric}: {type(exc).__name__}: {exc}")
        if value is None:
            return 404, status(404, "NotFound", f"no series of {metric} in {namespace} matches {labels}")
        now = time.time()
        with self._lock:
            self.served.append(Served(now, namespace, metric, labels, float(value)))
        return 200, value_list(metric, labels, float(value), now)


class ExternalMetricsAdapter:
    """Serve :class:`ExternalMetrics` over ``source`` on ``host``:``port`` with TLS, in a thread.

    ``port=0`` picks a free port (:attr:`port`). ``cert_file``/``key_file`` default to a
    self-signed certificate kept in ``cert_dir``. ``client_ca_file``: require a client certificate
    signed by it whose common name is in ``allowed_names`` (the aggregator's front proxy).
    """

    def __init__(self, source: ValueSource, *, metrics: Collection[str] = (BACKLOG_METRIC,),
                 host: str = "127.0.0.1", port: int = 0, cert_file: Path | None = None,
                 key_file: Path | None = None, cert_dir: Path | None = None,
                 client_ca_file: Path | None = None, allowed_names: Collection[str] = FRONT_PROXY_NAMES,
                 keep: int = 100_000) -> None:
        if (cert_file is None) != (key_file is None):
            raise ValueError("cert_file and key_file: give both or neither")
        if cert_file is None or key_file is None:
            if cert_dir is None:
                raise ValueError("cert_dir: needed to keep a self-signed certificate when no cert_file is given")
            cert_file, key_file = self_signed_certificate(cert_dir)
        self.tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.tls.load_cert_chain(str(cert_file), str(key_file))
        if client_ca_file is not None:
            self.tls.verify_mode = ssl.CERT_REQUIRED
            self.tls.load_verify_locations(str(client_ca_file))
        self.api = ExternalMetrics(source, metrics, allowed_names if client_ca_file is not None else None, keep)
        self._server = _Server((host, port), _Handler)
        self._server.adapter = self
        self._thread: threading.Thread | None = None

    @property
    def served(self) -> collections.deque[Served]:
        return self.api.served

    @property
    def host(self) -> str:
        return str(self._server.server_address[0])

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> "ExternalMetricsAdapter":
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.2},
                                        name="external-metrics", daemon=True)
        self._thread.start()
        log.info("external metrics adapter on https://%s:%d", self.host, self.port)
        return self

    def close(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(5)
        self._server.server_close()

    def __enter__(self) -> "ExternalMetricsAdapter":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()


def service_manifest(namespace: str, name: str, port: int, host: str = "localhost") -> dict[str, Any]:
    """The Service the APIService names: an ExternalName for the adapter's host."""
    return {"apiVersion": "v1", "kind": "Service", "metadata": {"name": name, "namespace": namespace},
            "spec": {"type": "ExternalName", "externalName": host,
                     "ports": [{"name": "https", "port": port, "protocol": "TCP"}]}}


def apiservice_manifest(namespace: str, service: str, port: int) -> dict[str, Any]:
    """``v1beta1.external.metrics.k8s.io`` served by the adapter behind ``namespace/service``
    (its certificate is self-signed: TLS verification is skipped)."""
    return {"apiVersion": "apiregistration.k8s.io/v1", "kind": "APIService", "metadata": {"name": APISERVICE_NAME},
            "spec": {"group": GROUP, "version": VERSION, "insecureSkipTLSVerify": True,
                     "groupPriorityMinimum": 100, "versionPriority": 100,
                     "service": {"namespace": namespace, "name": service, "port": port}}}
