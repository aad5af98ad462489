"""A service's traffic from a Prometheus server's HTTP API (``ReadsServiceMetrics``).

Config (``services.metrics``)::

    metrics:
      source: prometheus
      url: http://127.0.0.1:9090
      qps_query: sum by (replica) (rate(crossdock_service_requests_total{service="{service}"}[30s]))
      p95_query: histogram_quantile(0.95, sum by (le) (rate(crossdock_service_request_duration_seconds_bucket{service="{service}"}[30s])))
      in_flight_query: sum by (replica) (crossdock_service_in_flight{service="{service}"})   # optional
      cpu_query: sum by (replica) (rate(process_cpu_seconds_total{service="{service}"}[30s]))  # optional: cores
      window_seconds: 30

Each query is a PromQL *instant* query (``GET /api/v1/query``) in which ``{service}`` is replaced
by the service's name (a plain text replacement: PromQL's own braces stay as they are). A query
that keeps a ``replica`` label gives per-replica figures; the service's figure is the sum of its
series (of the qps query) and the largest value (of the p95 query). ``cpu_query`` (cores per
replica) feeds the throttling check (a CPU request below 0.8 of use). An empty answer means no
traffic (qps 0, no p95); a server that cannot be reached or refuses the query gives ``None``, so
the controller keeps the replicas it has instead of scaling on a guess.
"""

from __future__ import annotations

import json
import logging
import math
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping
from typing import Any

from crossdock.queue.errors import ConfigError
from crossdock.queue.serving import ServiceMetrics

log = logging.getLogger(__name__)

SERVICE_VAR = "{service}"
REPLICA_LABEL = "replica"
"""The series label whose value is a replica's ordinal (``CROSSDOCK_REPLICA`` in its environment)."""


class PrometheusError(Exception):
    """The server answered with an error (``status: error``) or not at all."""


class PrometheusMetrics:
    """``service_metrics(name)`` from instant queries against ``url``."""

    def __init__(self, url: str, qps_query: str, p95_query: str | None = None, *,
                 in_flight_query: str | None = None, cpu_query: str | None = None, window_seconds: float = 30.0,
                 timeout: float = 3.0, clock: Callable[[], float] = time.time) -> None:
        self.url = url.rstrip("/")
        self.qps, self.p95, self.in_flight, self.cpu = qps_query, p95_query, in_flight_query, cpu_query
        self.window_seconds = window_seconds
        self.timeout = timeout
        self.clock = clock

    def query(self, promql: str, at: float | None = None) -> list[tuple[dict[str, str], float]]:
        """An instant query's vector as (labels, value) pairs; a scalar answer has no labels."""
        params = {"query": promql}
        if at is not None:
            params["time"] = f"{at:.3f}"
        req = urllib.request.Request(f"{self.url}/api/v1/query", data=urllib.parse.urlencode(params).encode(),
                                     headers={"Content-Type": "application/x-www-form-urlencoded"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:  # noqa: S310 - URL from admin config
                answer = json.loads(resp.read())
        except urllib.error.HTTPError as exc:  # 400 bad_data, 422 execution: the body says why
            answer = _error_body(exc)
        except (OSError, ValueError) as exc:
            raise PrometheusError(f"{self.url}: {exc}") from exc
        if answer.get("status") != "success":
            raise PrometheusError(f"{self.url}: {answer.get('errorType', 'error')}: {answer.get('error', answer)} "
                                  f"(query {promql!r})")
        data = answer.get("data") or {}
        kind, result = data.get("resultType"), data.get("result") or []
        if kind == "scalar":
            return [({}, float(result[1]))]
        if kind != "vector":
            raise PrometheusError(f"{self.url}: query {promql!r} gave a {kind}, not an instant vector; "
                                  "drop the range selector's outer [..] or wrap it in rate()/sum()")
        return [(dict(s.get("metric") or {}), float(s["value"][1])) for s in result]

    def _series(self, query: str | None, service: str, at: float) -> list[tuple[dict[str, str], float]]:
        return self.query(query.replace(SERVICE_VAR, service), at) if query else []

    def service_metrics(self, service: str) -> ServiceMetrics | None:
        at = self.clock()
        try:
            qps_series = self._series(self.qps, service, at)
            p95_series = self._series(self.p95, service, at)
            flight_series = self._series(self.in_flight, service, at)
            cpu_series = self._series(self.cpu, service, at)
        except PrometheusError as exc:
            log.warning("service %s: no metrics from Prometheus: %s", service, exc)
            return None
        per_replica = _by_replica(qps_series)
        p95 = [v for _, v in p95_series if math.isfinite(v)]
        return ServiceMetrics(
            qps=sum(v for _, v in qps_series if math.isfinite(v)),
            p95_seconds=max(p95) if p95 else None,
            replica_qps=per_replica,
            in_flight={k: int(v) for k, v in _by_replica(flight_series).items()},
            window_seconds=self.window_seconds,
            at=at,
            cpu_used=_by_replica(cpu_series),
        )


def _by_replica(series: list[tuple[dict[str, str], float]]) -> dict[int, float]:
    out: dict[int, float] = {}
    for labels, value in series:
        ordinal = labels.get(REPLICA_LABEL, "")
        if ordinal.isdigit() and math.isfinite(value):
            out[int(ordinal)] = out.get(int(ordinal), 0.0) + value
    return out


def _error_body(exc: urllib.error.HTTPError) -> dict[str, Any]:
    try:
        return dict(json.loads(exc.read() or b"{}"))
    except ValueError:
        return {"status": "error", "errorType": str(exc.code), "error": exc.reason}


def from_config(metrics: Mapping[str, Any] | Any) -> PrometheusMetrics:
    """The source for a ``services.metrics`` block whose ``source`` is ``prometheus`` (a mapping or
    the config model); :class:`ConfigError` names what is missing or wrong."""
    get = metrics.get if isinstance(metrics, Mapping) else (lambda k, d=None: getattr(metrics, k, d))
    errors = []
    url = str(get("url") or "")
    if urllib.parse.urlsplit(url).scheme not in ("http", "https") or not urllib.parse.urlsplit(url).netloc:
        errors.append(f"services.metrics.url: {url!r} is not an http(s) URL; give the Prometheus server's, "
                      "e.g. http://127.0.0.1:9090")
    if not str(get("qps_query") or "").strip():
        errors.append("services.metrics.qps_query: missing; give a PromQL query of a service's requests per second, "
                      'e.g. sum by (replica) (rate(crossdock_service_requests_total{service="{service}"}[30s]))')
    window = get("window_seconds", 30.0)
    try:
        window = float(30.0 if window is None else window)
        if not window > 0:
            raise ValueError
    except (TypeError, ValueError):
        errors.append(f"services.metrics.window_seconds: {window!r} is not a positive number of seconds; e.g. 30")
    if errors:
        raise ConfigError(errors)
    return PrometheusMetrics(url, str(get("qps_query")), get("p95_query") or None,
                             in_flight_query=get("in_flight_query") or None, cpu_query=get("cpu_query") or None,
                             window_seconds=window)
