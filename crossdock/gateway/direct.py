"""The faces' view of the service when this process may talk to Redis itself (single-user, and
the service's own end of the socket and of the REST API): each method is one ``service`` call
for one caller, and every read shows another user's work as the config's ``private_data``
allows (:mod:`crossdock.queue.privacy`)."""

from __future__ import annotations

import dataclasses
import threading
from typing import Any, Iterable, Sequence

from crossdock import serve, service
from crossdock.queue import privacy
from crossdock.queue.errors import PermissionDenied
from crossdock.queue.models import Job, JobSpec
from crossdock.queue.serving import ServiceRecord, ServiceSpec
from crossdock.queue.snapshot import Node
from crossdock.runtime import Runtime

LISTINGS = ("queued", "all")
"""``ids(which)``: the pending and running jobs (squeue's default), or every job."""
ALL_LIMIT = 10_000
MAX_APPLY_WAIT = 60.0
"""The longest ``config apply`` waits for the leader to switch (a socket request must end)."""


class Direct:
    """``rt``'s store for ``who``; ``send`` (a Celery sender) is made on first use when not given."""

    remote = False

    def __init__(self, rt: Runtime, who: service.Caller | None = None, send: Any = None):
        self.rt = rt
        self.who = who or service.caller(rt)
        self._send, self._lock = send, threading.Lock()

    def send(self, name: str, args: list, backend_kind: str) -> None:
        with self._lock:  # one Celery producer, shared by the socket server's threads
            if self._send is None:
                from crossdock.workers.app import celery_sender, make_app

                self._send = celery_sender(make_app(self.rt.redis_url))
            self._send(name, args, backend_kind)

    # --- what a submission needs to know --------------------------------------------------
    def limits(self) -> dict[str, Any]:
        """Who the caller is and what the CLI checks before it sends a submission."""
        cfg = self.rt.config
        return {"user": self.who.name, "admin": self.who.admin, "max_array_size": cfg.scheduler.max_array_size,
                "queues": sorted(cfg.queues), "pools": sorted(cfg.pools)}

    # --- mutations: the service's functions, its ownership checks included --------------------
    def submit(self, specs: Sequence[JobSpec], token: str | None = None) -> list[Job]:
        return service.submit(self.rt, list(specs), token=token, who=self.who)

    def check(self, specs: Sequence[JobSpec]) -> list[Job]:
        """Admission as ``submit`` does it, storing nothing (``--dry-run``)."""
        return service.check(self.rt, list(specs), service.load_inventory(self.rt, store_optional=True), self.who)

    def cancel(self, refs: Sequence[str]) -> list[tuple[str, str]]:
        return service.cancel(self.rt, refs, self.send, self.who)

    def hold(self, refs: Sequence[str], held: bool) -> list[tuple[Job, bool]]:
        return service.hold(self.rt, refs, held, self.who)

    def requeue(self, refs: Sequence[str]) -> list[tuple[Job, bool]]:
        return service.requeue(self.rt, refs, self.send, self.who)

    def update(self, refs: Sequence[str], changes: dict[str, Any]) -> list[tuple[Job, bool]]:
        return service.update(self.rt, refs, changes, self.who)

    def authorize(self, job_id: int, action: str) -> None:
        service.authorize(self.rt, self.who, [self.rt.store.get(job_id)], action)

    def result(self, job_id: int) -> bytes | None:
        return service.result(self.rt, self.rt.store.get(job_id), self.who)

    def sign(self, payload: str) -> str:
        return service.sign_payload(self.rt, self.who, payload)

    # --- reads: another user's work as private_data shows it -----------------------------------
    @property
    def private(self) -> list[str]:
        return self.rt.config.private_data

    def _shown(self, job: Job) -> Job:
        return privacy.visible(job, self.who.name, self.who.admin, self.private)

    def jobs(self, ids: Sequence[int]) -> list[Job]:
        return [self._shown(j) for j in self.rt.store.get_many(ids)]

    def job(self, job_id: int) -> Job:
        return self._shown(self.rt.store.get(job_id))

    def resolve(self, ref: str) -> list[int]:
        return self.rt.store.resolve(ref)

    def ids(self, which: str) -> list[int]:
        store = self.rt.store
        if which == "all":
            return store.all_ids(limit=ALL_LIMIT)
        return sorted(set(store.pending_ids()) | set(store.active_ids()))

    def events(self, job_id: int) -> list[dict[str, str]]:
        """One job's events; none of another user's job under ``private_data: [events]``."""
        if privacy.events_private(self.private) and not self._mine([job_id]):
            return []
        return self.rt.store.events(job_id)

    def event_stream(self, job_ids: Sequence[int], since: float | None, after: str | None, count: int,
                     block_ms: int | None) -> dict[str, Any]:
        page = service.events(self.rt, job_ids, since=since, after=after, count=count, block_ms=block_ms)
        if privacy.events_private(self.private) and not self.who.admin:
            jobs = {row["job"] for row in page["events"] if row.get("job")}
            mine = {str(i) for i in self._mine(int(j) for j in jobs if j.isdigit())}
            page["events"] = [row for row in page["events"] if not row.get("job") or row["job"] in mine]
        return page

    def _mine(self, ids: Iterable[int]) -> set[int]:
        """Those of ``ids`` whose jobs the caller sees whole (an expired one counts as not)."""
        return {j.id for j in self.rt.store.get_many(ids)
                if privacy.sees_all(self.who.name, self.who.admin, j.spec.user)}

    def ids_after(self, after: int, count: int) -> list[int]:
        """Up to ``count`` stored job ids above ``after``, ascending: ``queue -t all`` pages with it."""
        return self.rt.store.ids_after(after, min(count, ALL_LIMIT))

    def history(self, since: float | None) -> list[dict[str, Any]]:
        """Expired jobs' records ended at ``since`` (epoch seconds) or later (sacct's window)."""
        return [privacy.visible_record(rec, self.who.name, self.who.admin, self.private)
                for rec in service.history(self.rt, since=since)]

    def planned(self, ids: Sequence[int]) -> list[list[Any]]:
        """``[id, planned start (epoch) or None, nodes]`` for pending jobs the scheduler planned:
        backfill's reservations, a preemptor's nominated node."""
        store = self.rt.store
        out = {i: [i, None, node] for i, node in store.nominations(ids).items()}
        for i, (at, nodes) in store.expected_starts(ids).items():
            out[i] = [i, at.timestamp(), ",".join(nodes) or (out.get(i) or [None, None, ""])[2]]
        return list(out.values())

    def why(self, job_id: int) -> dict[str, Any]:
        """Why the caller's pending job pends and what would start it sooner (``crossdock why``)."""
        return service.why(self.rt, job_id, self.who)

    def usage(self) -> dict[str, float]:
        """Decayed fair-share usage per queue and per queue/user."""
        return privacy.visible_usage(self.rt.store.usage()[0], self.who.name, self.who.admin, self.private)

    def inventory(self) -> list[Node]:
        return service.load_inventory(self.rt)

    # --- the service's own state ------------------------------------------------------------------
    def health(self) -> dict[str, Any]:
        """``crossdock health`` as the service's process sees itself (its state dir, its store)."""
        from crossdock.workers.health import collect

        return collect()

    def autoscaling(self) -> dict[str, Any]:
        return service.autoscaling(self.rt)

    def deschedule(self, dry_run: bool) -> dict[str, Any]:
        """The descheduler's last plan, or a plan made now (``dry_run``: an admin's, it reads every
        backend); ``enabled`` says whether the descheduler runs."""
        if dry_run and not self.who.admin:
            raise PermissionDenied(f"deschedule --dry-run: plans over every backend, which only root or an admin"
                                   f" asks for (you are {self.who.name!r}); without --dry-run: the last pass")
        return {**service.deschedule(self.rt, dry_run), "enabled": self.rt.config.descheduler.enabled}

    # --- inference services: anyone lists and shows; owners and admins change ---------------------
    def services(self) -> list[ServiceRecord]:
        return [self._service_shown(r) for r in serve.list_services(self.rt)]

    def service(self, name: str) -> serve.ServiceView:
        view = serve.show(self.rt, name)
        return serve.ServiceView(self._service_shown(view.record), [(self._shown(j), e) for j, e in view.replicas],
                                 view.events, view.warnings)

    def _service_shown(self, rec: ServiceRecord) -> ServiceRecord:
        spec = privacy.visible_service(rec.spec, self.who.name, self.who.admin, self.private)
        return rec if spec is rec.spec else dataclasses.replace(rec, spec=spec)

    def deploy(self, spec: ServiceSpec) -> ServiceRecord:
        return serve.deploy(self.rt, spec, self.who)

    def service_update(self, name: str, changes: dict[str, Any]) -> ServiceRecord:
        return serve.update(self.rt, name, changes, self.who)

    def service_scale(self, name: str, replicas: int | None) -> ServiceRecord:
        return serve.scale(self.rt, name, replicas, self.who)

    def service_delete(self, name: str) -> ServiceRecord:
        return serve.delete(self.rt, name, self.who)

    # --- the config: anyone reads the one in force; admins change it -------------------------------
    def config_in_force(self) -> dict[str, Any]:
        """The config in force: its YAML, its live record (None: the file's) and a stored version
        the leader has not switched to yet."""
        from crossdock.workers.liveconfig import in_force_text

        text, record = in_force_text(self.rt)
        pending = self.rt.store.live_config.desired()
        waiting = pending is not None and (record is None or pending["version"] > record["version"])
        return {"text": text, "record": record, "pending_version": pending["version"] if waiting else None,
                "path": str(self.rt.settings.config_path)}

    def apply_config(self, text: str, source: str, wait: float) -> dict[str, Any]:
        """``config apply``: the text (which the client read with its own rights) checked whole and
        stored for the leader, then up to ``wait`` seconds (at most :data:`MAX_APPLY_WAIT`) for the
        leader to switch to it. Admins only; :class:`ConfigError` refuses it whole."""
        import time

        from crossdock.workers.liveconfig import apply_text

        if not self.who.admin:
            raise PermissionDenied(f"config apply: {self.who.name} is not an admin (root or one listed in admins:"
                                   " of the config in force)")
        applied = apply_text(self.rt, text, source, self.who.name)
        store = self.rt.store
        holder, in_force = store.lease_holder(), store.live_config.in_force_version()
        deadline = time.monotonic() + max(0.0, min(wait, MAX_APPLY_WAIT))
        while holder and in_force < applied.version and time.monotonic() < deadline:
            time.sleep(0.1)
            in_force = store.live_config.in_force_version()
        return {"version": applied.version, "new": applied.new, "in_force": in_force >= applied.version,
                "leader": holder, "changes": [c.to_json() for c in applied.changes],
                "lines": [str(c) for c in applied.changes], "warnings": applied.warnings,
                "watched": str(self.rt.settings.config_path)}

    def may_read_output(self, job: Job) -> None:
        """Refuse another user's output under ``private_data: [jobs]`` (``PermissionDenied``, a
        ``refused`` event); with it opened, the output files' own permissions decide."""
        if privacy.output_private(self.private):
            service.authorize(self.rt, self.who, [job], "read the output of")

    def backend_logs(self, job_id: int) -> str | None:
        """A job's output as the service serves it: a Python job's as its runner kept it in the
        store (every attempt's; its owner's and admins' only), another's as its backend serves it
        (a pod's log); None when it keeps files (which the caller reads with its own rights, once
        the same check allows it)."""
        job = self.rt.store.get(job_id)
        self.may_read_output(job)
        if job.spec.python is not None:
            service.authorize(self.rt, self.who, [job], "read the output of")
            return "".join(self.rt.store.output(job.id) or [])
        if not job.backend or not self.rt.backends.capabilities(job.backend).logs:
            return None
        service.authorize(self.rt, self.who, [job], "read the output of")
        return self.rt.backends(job.backend).logs(job)  # type: ignore[attr-defined]
