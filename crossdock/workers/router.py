"""The local services' router: one loopback HTTP listener per service in front of its replicas.

``crossdock up`` runs it as a supervised part (:class:`RouterPart`, a thread with its own event
loop). Every ``refresh_seconds`` it reads the services and their endpoints from the store
(what the local backend recorded when it started each replica) and opens or closes listeners;
every ``probe_seconds`` it probes each replica's readiness path and tells the store when that
changes (``set_ready``). A request goes to the ready, non-draining replica with the fewest
requests outstanding (:func:`crossdock.workers.traffic.pick`); a replica that refuses the
connection (it died) is skipped and the request tried on another, so a crash between two probes
costs no request. Drain: a draining replica gets no new request; once its last one is answered
the router calls ``set_drained``, and the controller then stops the job. So scale-in loses
nothing.

Metrics: prometheus-client counters of its own registry, served on ``127.0.0.1:metrics_port``
at ``/metrics`` (``crossdock_service_requests_total{service,replica,code}``,
``crossdock_service_request_duration_seconds{service}``, ``crossdock_service_in_flight{service,replica}``),
and :meth:`Router.service_metrics` (``ReadsServiceMetrics``) over a sliding window of its own
counts, which it also publishes to the store every ``publish_seconds`` for the leader's
controller, wherever that runs.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
import time
from dataclasses import dataclass
from typing import Any, Protocol

import aiohttp
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

from crossdock.queue.serving import Endpoint, ServiceMetrics
from crossdock.workers.traffic import Upstream, Window, pick, to_drain

log = logging.getLogger(__name__)

HOP_BY_HOP = frozenset({"connection", "keep-alive", "proxy-authenticate", "proxy-authorization", "te", "trailers",
                        "transfer-encoding", "upgrade", "host", "content-length"})


@dataclass(frozen=True)
class RouterSettings:
    host: str = "127.0.0.1"
    refresh_seconds: float = 0.5
    probe_seconds: float = 0.5
    probe_timeout_seconds: float = 1.0
    failure_threshold: int = 2
    """Failed probes in a row before a ready replica is unready (one success makes it ready)."""
    window_seconds: float = 10.0
    publish_seconds: float = 1.0
    wait_seconds: float = 5.0
    """How long a request waits for a ready replica when none is (then 503)."""
    request_timeout_seconds: float = 300.0
    metrics_port: int | None = 0
    """0: a free port; None: no metrics listener."""
    metrics_port_span: int = 1
    """Ports tried from ``metrics_port`` (when not 0) before the router serves no metrics."""


@dataclass(frozen=True)
class RouteSpec:
    """A service the router serves: its replicas' readiness path and the port it asks for (0: any)."""

    ready_path: str = "/healthz"
    port: int = 0


class RouteSource(Protocol):
    """What the router reads and writes: the service store, through :class:`crossdock.workers.routes.StoreRoutes`."""

    def routes(self) -> dict[str, RouteSpec]: ...

    def endpoints(self, service: str) -> list[Endpoint]: ...

    def set_ready(self, job_id: int, attempt: int, ready: bool) -> None: ...

    def set_drained(self, job_id: int) -> None: ...

    def set_route(self, service: str, host: str, port: int) -> None: ...

    def put_metrics(self, service: str, sample: ServiceMetrics) -> None: ...


class Metrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("crossdock_service_requests_total", "Requests the router answered",
                                ["service", "replica", "code"], registry=self.registry)
        self.duration = Histogram("crossdock_service_request_duration_seconds", "Time from arrival to answer",
                                  ["service"], registry=self.registry,
                                  buckets=(.005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30))
        self.in_flight = Gauge("crossdock_service_in_flight", "Requests under way", ["service", "replica"],
                               registry=self.registry)
        self._children: dict[tuple, Any] = {}

    def child(self, metric, *labels: str):
        """``metric.labels(*labels)``, looked up once (it takes a lock and builds a key each time)."""
        key = (metric, *labels)
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(*labels)
        return found


class Route:
    """One service's listener, upstreams and window."""

    def __init__(self, name: str, spec: RouteSpec, window_seconds: float):
        self.name, self.spec = name, spec
        self.upstreams: dict[tuple[int, int], Upstream] = {}
        self.window = Window(window_seconds, time.monotonic())
        self.changed = asyncio.Event()
        self.runner: web.AppRunner | None = None
        self.port = 0

    def listed(self) -> list[Upstream]:
        return list(self.upstreams.values())

    def poke(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()


class Router:
    def __init__(self, source: RouteSource, settings: RouterSettings = RouterSettings()):
        self.source, self.settings = source, settings
        self.routes: dict[str, Route] = {}
        self.metrics = Metrics()
        self.metrics_port: int | None = None
        self.session: aiohttp.ClientSession | None = None
        self.loop: asyncio.AbstractEventLoop | None = None
        self.ready_event = threading.Event()
        self._stop: asyncio.Event | None = None
        self.errors: dict[str, str] = {}
        """The last error of each step (refresh, probe, publish) failing now; ``stopped`` when it ended."""
        self.picked = 0

    # --- ReadsServiceMetrics ---------------------------------------------------------------------
    def service_metrics(self, service: str) -> ServiceMetrics | None:
        route = self.routes.get(service)
        return None if route is None else route.window.stats(time.monotonic(), route.listed(), time.time())

    def ports(self) -> dict[str, int]:
        return {name: r.port for name, r in self.routes.items()}

    # --- the loop ---------------------------------------------------------------------------------
    async def serve(self) -> None:
        self.loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        self.session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.settings.request_timeout_seconds),
                                             connector=aiohttp.TCPConnector(limit=0))
        metrics_runner = await self._start_metrics()
        try:
            tasks = [asyncio.create_task(self._every(self.settings.refresh_seconds, self.refresh)),
                     asyncio.create_task(self._every(self.settings.probe_seconds, self.probe)),
                     asyncio.create_task(self._every(self.settings.publish_seconds, self.publish))]
            await self._guarded(self.refresh)
            self.ready_event.set()
            await self._stop.wait()
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        finally:
            for route in list(self.routes.values()):
                await self._close(route)
            if metrics_runner:
                await metrics_runner.cleanup()
            await self.session.close()

    def stop(self) -> None:
        if self.loop is not None and self._stop is not None:
            self.loop.call_soon_threadsafe(self._stop.set)

    async def _every(self, seconds: float, step) -> None:
        while True:
            await asyncio.sleep(seconds)
            await self._guarded(step)

    async def _guarded(self, step) -> None:
        try:
            await step()
        except Exception as exc:  # the store away, a replica's odd answer: the next turn tries again
            if str(exc) != self.errors.get(step.__name__):
                log.warning("router: %s failed: %s", step.__name__, exc)
            self.errors[step.__name__] = str(exc)
        else:
            self.errors.pop(step.__name__, None)

    async def _io(self, fn, *args):
        assert self.loop is not None
        return await self.loop.run_in_executor(None, fn, *args)

    async def _start_metrics(self) -> web.AppRunner | None:
        if self.settings.metrics_port is None:
            return None
        async def metrics(_: web.Request) -> web.Response:
            return web.Response(body=generate_latest(self.metrics.registry), headers={"Content-Type": CONTENT_TYPE_LATEST})
        app = web.Application()
        app.router.add_get("/metrics", metrics)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        first = self.settings.metrics_port
        for port in range(first, first + max(1, self.settings.metrics_port_span) if first else 1):
            try:
                await web.TCPSite(runner, self.settings.host, port).start()
            except OSError as exc:
                if exc.errno not in (errno.EADDRINUSE, errno.EACCES):
                    raise
                continue
            self.metrics_port = runner.addresses[0][1]
            return runner
        log.warning("router: metrics ports %s-%s are all taken; it serves no metrics", first,
                    first + self.settings.metrics_port_span - 1)
        await runner.cleanup()
        return None

    # --- services and endpoints -------------------------------------------------------------------
    async def refresh(self) -> None:
        wanted = await self._io(self.source.routes)
        for name in [n for n in self.routes if n not in wanted]:
            await self._close(self.routes.pop(name))
        for name, spec in wanted.items():
            route = self.routes.get(name)
            if route is None:
                route = self.routes[name] = Route(name, spec, self.settings.window_seconds)
                await self._open(route)
            route.spec = spec
            if spec.port != route.port:  # new, moved, or its address not recorded yet (the store was away)
                await self._io(self.source.set_route, name, self.settings.host, route.port)
            views = await self._io(self.source.endpoints, name)
            self._merge(route, views)
            await self._report_drained(route)

    def _merge(self, route: Route, views: list[Endpoint]) -> None:
        seen = set()
        for v in views:
            if not v.host or not v.port:
                continue  # recorded by a backend the router does not front (or not started yet)
            key = (v.job_id, v.attempt)
            seen.add(key)
            up = route.upstreams.get(key)
            if up is None or (up.host, up.port) != (v.host, v.port):
                up = route.upstreams[key] = Upstream(v.job_id, v.attempt, v.replica, v.host, v.port, ready=v.ready,
                                                     reported=v.ready)
            was = up.serving
            up.draining, up.drained = v.draining or v.drained, up.drained or v.drained
            if was and not up.serving:
                log.info("router: %s replica %s (job %s) draining", route.name, up.replica, up.job_id)
        for key in [k for k in route.upstreams if k not in seen]:
            del route.upstreams[key]
        route.poke()

    async def _report_drained(self, route: Route) -> None:
        for up in to_drain(route.listed()):
            up.drained = True  # first: a request that ends meanwhile must not report it again
            await self._io(self.source.set_drained, up.job_id)
            log.info("router: %s replica %s (job %s) drained", route.name, up.replica, up.job_id)

    async def _open(self, route: Route) -> None:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        async def handle(request: web.Request) -> web.StreamResponse:
            return await self._proxy(route, request)

        app.router.add_route("*", "/{tail:.*}", handle)
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.settings.host, route.spec.port).start()
        except OSError as exc:
            if not route.spec.port:
                raise
            log.warning("router: port %s for %s is taken (%s); listening on a free one", route.spec.port, route.name, exc)
            await web.TCPSite(runner, self.settings.host, 0).start()
        route.runner, route.port = runner, runner.addresses[0][1]
        log.info("router: %s on http://%s:%s", route.name, self.settings.host, route.port)

    async def _close(self, route: Route) -> None:
        if route.runner is not None:
            await route.runner.cleanup()
            route.runner = None

    # --- readiness --------------------------------------------------------------------------------
    async def probe(self) -> None:
        checks = [(route, up) for route in self.routes.values() for up in route.listed() if not up.drained]
        await asyncio.gather(*(self._probe_one(route, up) for route, up in checks))

    async def _probe_one(self, route: Route, up: Upstream) -> None:
        assert self.session is not None
        try:
            async with self.session.get(up.url(route.spec.ready_path),
                                        timeout=aiohttp.ClientTimeout(total=self.settings.probe_timeout_seconds)) as r:
                ok = 200 <= r.status < 400
        except (aiohttp.ClientError, asyncio.TimeoutError, OSError):
            ok = False
        up.fails = 0 if ok else up.fails + 1
        ready = ok or (up.ready and up.fails < self.settings.failure_threshold)
        if ready != up.ready:
            up.ready = ready
            route.poke()
        if ready != up.reported:
            await self._io(self.source.set_ready, up.job_id, up.attempt, ready)
            up.reported = ready

    # --- metrics ----------------------------------------------------------------------------------
    async def publish(self) -> None:
        now, wall = time.monotonic(), time.time()
        for name, route in list(self.routes.items()):
            await self._io(self.source.put_metrics, name, route.window.stats(now, route.listed(), wall))

    # --- requests ---------------------------------------------------------------------------------
    async def _upstream(self, route: Route, tried: frozenset) -> Upstream | None:
        deadline = time.monotonic() + self.settings.wait_seconds
        while True:
            up = pick(route.listed(), tried)
            left = deadline - time.monotonic()
            if up is not None or left <= 0:
                return up
            try:
                await asyncio.wait_for(route.changed.wait(), left)
            except asyncio.TimeoutError:
                pass

    async def _proxy(self, route: Route, request: web.Request) -> web.StreamResponse:
        assert self.session is not None
        started = time.monotonic()
        body = await request.read()
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        tried: frozenset = frozenset()
        while True:
            up = await self._upstream(route, tried)
            if up is None:
                if not tried:
                    route.window.arrive(started, None)
                return self._answer(route, None, started, web.Response(status=503, text="no ready replica\n"))
            self.picked += 1
            up.in_flight += 1
            up.last_pick = self.picked
            if not tried:  # a retry is the same arrival
                route.window.arrive(started, up.replica)
            gauge = self.metrics.child(self.metrics.in_flight, route.name, str(up.replica))
            gauge.inc()
            try:
                async with self.session.request(request.method, up.url(request.path_qs), headers=headers,
                                                data=body, allow_redirects=False) as resp:
                    payload = await resp.read()
                    out = web.Response(status=resp.status, body=payload,
                                       headers={k: v for k, v in resp.headers.items() if k.lower() not in HOP_BY_HOP})
                return self._answer(route, up, started, out)
            except aiohttp.ClientConnectorError:
                up.ready = False  # refused: it is gone or going; nothing was sent, so another may take it
                tried = tried | {up.key}
            except (aiohttp.ClientError, asyncio.TimeoutError) as exc:
                return self._answer(route, up, started, web.Response(status=502, text=f"replica failed: {exc}\n"))
            finally:
                up.in_flight -= 1
                gauge.dec()
                if up.draining and up.in_flight == 0:
                    asyncio.ensure_future(self._report_drained(route))

    def _answer(self, route: Route, up: Upstream | None, started: float, resp: web.Response) -> web.Response:
        now = time.monotonic()
        route.window.finish(now, now - started)
        m = self.metrics
        m.child(m.requests, route.name, str(up.replica) if up else "none", str(resp.status)).inc()
        m.child(m.duration, route.name).observe(now - started)
        return resp


class RouterPart:
    """The router as a part of ``crossdock up`` (:class:`crossdock.workers.supervision.Part`)."""

    name = "router"

    def __init__(self, source: RouteSource, settings: RouterSettings = RouterSettings()):
        self.source, self.settings = source, settings
        self.router: Router | None = None
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.router = Router(self.source, self.settings)
        self.thread = threading.Thread(target=self._run, args=(self.router,), name="router", daemon=True)
        self.thread.start()
        self.router.ready_event.wait(10)

    @staticmethod
    def _run(router: Router) -> None:
        try:
            asyncio.run(router.serve())
        except Exception as exc:  # the part is restarted by up's supervision
            router.errors["stopped"] = str(exc)
            log.error("router stopped: %s", exc)

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()

    def report(self) -> dict[str, Any]:
        r = self.router
        return {"alive": self.alive(), "services": r.ports() if r else {},
                "metrics_port": r.metrics_port if r else None, "errors": dict(r.errors) if r else {}}

    def stop(self) -> None:
        if self.router is not None:
            self.router.stop()
        if self.thread is not None:
            self.thread.join(5)
