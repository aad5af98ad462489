"""Every Redis key crossdock uses, in one place. ``prefix`` namespaces one installation."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Keys:
    prefix: str = "cd"

    # counters and indexes
    @property
    def job_counter(self) -> str:
        """INCR counter: job ids are integers, like Slurm's."""
        return f"{self.prefix}:counter:job"

    @property
    def store_format(self) -> str:
        """STRING: the store's format (:mod:`.upgrade`); absent in a store written before specs were sealed."""
        return f"{self.prefix}:format"

    @property
    def installation(self) -> str:
        """STRING (JSON): the store's identity and whether it knows legacy tags (:meth:`JobStore.installation`)."""
        return f"{self.prefix}:installation"

    @property
    def format_lock(self) -> str:
        """STRING (with a TTL): the token of the process bringing the store to the current format."""
        return f"{self.prefix}:format:lock"

    @property
    def all_jobs(self) -> str:
        """ZSET of every job id (score = id)."""
        return f"{self.prefix}:jobs"

    @property
    def pending(self) -> str:
        """ZSET of PENDING job ids (score = id)."""
        return f"{self.prefix}:pending"

    @property
    def active(self) -> str:
        """ZSET of SCHEDULED and RUNNING job ids (score = id)."""
        return f"{self.prefix}:active"

    @property
    def finished(self) -> str:
        """ZSET of job ids in a terminal state (score = when they got there): retention's queue."""
        return f"{self.prefix}:finished"

    @property
    def history(self) -> str:
        """HASH job id -> compact JSON record of a job that expired from the hot keys."""
        return f"{self.prefix}:history"

    @property
    def history_by_end(self) -> str:
        """ZSET of history job ids (score = end time), for time windows and trimming."""
        return f"{self.prefix}:history:by_end"

    @property
    def events(self) -> str:
        """STREAM of every event (who did what, when)."""
        return f"{self.prefix}:events"

    @property
    def scheduler_lease(self) -> str:
        """STRING holder id, PX lease: the one scheduling leader."""
        return f"{self.prefix}:lease:scheduler"

    @property
    def usage(self) -> str:
        """HASH of decayed fair-share usage per queue and queue/user; ``_at`` is when it was last accrued."""
        return f"{self.prefix}:usage"

    @property
    def nominations(self) -> str:
        """HASH preemptor job id -> node whose capacity is being freed for it."""
        return f"{self.prefix}:nominations"

    @property
    def expected_starts(self) -> str:
        """HASH job id -> "epoch start|node,node": the last cycle's backfill reservations (squeue --start)."""
        return f"{self.prefix}:expected_starts"

    @property
    def inventory(self) -> str:
        """STRING JSON of the last inventory, for `crossdock info` without backend calls."""
        return f"{self.prefix}:inventory"

    # the autoscaler (crossdock.workers.autoscaler; records in redis_store/autoscale.py)
    @property
    def autoscale_state(self) -> str:
        """STRING JSON of the ``AutoscaleState`` the next pass starts from (recommendations, events...)."""
        return f"{self.prefix}:autoscale:state"

    @property
    def autoscale_decisions(self) -> str:
        """STRING JSON of the last pass: every fleet's and pool's decision, for ``crossdock autoscale``."""
        return f"{self.prefix}:autoscale:decisions"

    @property
    def autoscale_changes(self) -> str:
        """HASH ``fleet:<queue>`` | ``pool:<pool>`` -> JSON of its last change (when, from, to, why)."""
        return f"{self.prefix}:autoscale:changes"

    # the descheduler (crossdock.workers.descheduler; records in redis_store/descheduler.py)
    @property
    def deschedule_moves(self) -> str:
        """HASH job id -> JSON of its moves (count, last time, from where): budget and cooldown."""
        return f"{self.prefix}:deschedule:moves"

    @property
    def deschedule_destinations(self) -> str:
        """HASH job id -> "node|attempt": the destination reserved for a moved job's next attempt."""
        return f"{self.prefix}:deschedule:destinations"

    @property
    def deschedule_plan(self) -> str:
        """STRING JSON of the last plan (moves and skipped candidates with why), for ``crossdock deschedule``."""
        return f"{self.prefix}:deschedule:plan"

    # inference services (records in redis_store/services.py)
    @property
    def services(self) -> str:
        """SET of every service name."""
        return f"{self.prefix}:services"

    def service(self, name: str) -> str:
        """HASH spec, generation, status (JSON), override, deleting, address, created of one service."""
        return f"{self.prefix}:svc:{name}"

    def service_jobs(self, name: str) -> str:
        """SET of the replica job ids of one service the controller still follows."""
        return f"{self.prefix}:svc:{name}:jobs"

    def service_endpoints(self, name: str) -> str:
        """SET of the replica job ids of one service that have an endpoint record."""
        return f"{self.prefix}:svc:{name}:endpoints"

    def service_metrics(self, name: str) -> str:
        """STRING JSON of the latest traffic sample of one service (with a TTL: stale samples go)."""
        return f"{self.prefix}:svc:{name}:metrics"

    def service_events(self, name: str) -> str:
        """STREAM of one service's events (scaled, replica created/drained/stopped, widened …)."""
        return f"{self.prefix}:svc:{name}:events"

    def endpoint(self, job_id: int) -> str:
        """HASH service, replica, attempt, host, port, ready, draining, drained, draining_since of a replica job."""
        return f"{self.prefix}:job:{job_id}:endpoint"

    # the REST API (crossdock.api; records in redis_store/access.py)
    @property
    def api_tokens(self) -> str:
        """HASH token id -> JSON of one bearer token: user, admin, salt, HMAC of the secret, who made it, when."""
        return f"{self.prefix}:api:tokens"

    # the live admin config (crossdock config apply; records in redis_store/liveconfig.py)
    @property
    def config_desired(self) -> str:
        """HASH of the config last stored for the leader: version, text (YAML), digest, source, by, at."""
        return f"{self.prefix}:config:desired"

    @property
    def config_in_force(self) -> str:
        """HASH of the config the leader switched to, as ``config_desired`` plus holder, switched_at."""
        return f"{self.prefix}:config:in_force"

    @property
    def config_sources(self) -> str:
        """HASH source (a file's absolute path) -> JSON {version, text} of the last config stored from it."""
        return f"{self.prefix}:config:sources"

    # per job
    def job(self, job_id: int) -> str:
        """HASH: spec (JSON) and status fields of one job."""
        return f"{self.prefix}:job:{job_id}"

    def job_events(self, job_id: int) -> str:
        """LIST of one job's events (JSON) after its first, which is the job hash's ``ev0``; made by
        the first transition. A STREAM for jobs stored before lists."""
        return f"{self.prefix}:job:{job_id}:events"

    def result(self, job_id: int) -> str:
        """STRING cloudpickled return value or exception of a Python-callable job."""
        return f"{self.prefix}:job:{job_id}:result"

    def output(self, job_id: int) -> str:
        """LIST of text chunks: what a Python job printed (stdout and stderr, interleaved), every
        attempt's in turn, as its runner appended them (expires with a TTL, as results do)."""
        return f"{self.prefix}:job:{job_id}:output"

    def checkpoint(self, job_id: int) -> str:
        """STRING (hex) sealed payload a Python job's ``checkpoint()`` hook returned when it was
        stopped: its next attempt runs it instead of the submitted call."""
        return f"{self.prefix}:job:{job_id}:checkpoint"

    def call_parts(self, ref: str) -> str:
        """HASH ``fn`` | ``<task id>`` -> base64 of a sealed pickle: one ``map``'s function, once,
        and each task's arguments (expires with a TTL, as results do)."""
        return f"{self.prefix}:pycall:{ref}"

    def heartbeat(self, job_id: int) -> str:
        """STRING with TTL, refreshed by the process that watches a running local job."""
        return f"{self.prefix}:job:{job_id}:heartbeat"

    def dispatch_claim(self, job_id: int, attempt: int) -> str:
        """STRING SET NX by the first delivery of a dispatch task: later deliveries do nothing."""
        return f"{self.prefix}:job:{job_id}:dispatch:{attempt}"

    def dispatcher(self, worker: str) -> str:
        """STRING with TTL, refreshed while the dispatch task ``worker`` (host:task id, the value
        of its claims) runs: a claim whose dispatcher stopped refreshing was left by a dead task."""
        return f"{self.prefix}:dispatcher:{worker}"

    def array(self, array_job_id: int) -> str:
        """ZSET of the task job ids of one array (score = task id)."""
        return f"{self.prefix}:array:{array_job_id}"

    def idempotency(self, owner: str, token: str) -> str:
        """STRING: the job ids first created with this client-supplied token by this owner (a
        user name has no ``:``), so that one user's token never answers another's submission."""
        return f"{self.prefix}:idem:{owner}:{token}"

    def user_jobs(self, user: str) -> str:
        """ZSET of the job ids of one user still in the hot keys (added at submit, removed when
        archived): its members also in ``pending`` or ``active`` are what MaxSubmitJobs counts."""
        return f"{self.prefix}:user:{user}:jobs"

    def by_name(self, user: str, name: str) -> str:
        """ZSET of job ids with this user and name (singleton dependencies)."""
        return f"{self.prefix}:name:{user}:{name}"
