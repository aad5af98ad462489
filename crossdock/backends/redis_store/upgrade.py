"""The store's format, and bringing a store an earlier release wrote to it.

Format 2 (this release): every job's spec is sealed and its environment encrypted (:mod:`.sealing`),
and every job in the hot keys is in its owner's set (``Keys.user_jobs``). A store written by
crossdock 0.1, before specs were sealed, carries no format key; its pending, held and placed jobs
would all be refused (``BadSeal``) by what runs jobs here. So the service, which holds the master
key, seals once every unsealed spec present when it first opens such a store (:func:`ensure_format`,
an event ``sealed_on_upgrade`` on each job), then writes the format key. From then on an unsealed
spec is refused as in a store this release made: sealing what was there at the upgrade opens no
new hole, since whoever could write Redis before it could already run anything under 0.1.

A store this release made is marked with its first jobs (``JobStore.submit``), or when the
service first opens it empty: an unsealed spec written into it is never sealed here.

One process migrates at a time (``Keys.format_lock``, a lease kept while it works); another
starting meanwhile waits for the format key, and takes over should the first die half-way (sealing
is per job and skips what is sealed). A store with a format newer than this release's is refused.
"""

from __future__ import annotations

import logging
import time
import uuid
from typing import Callable

import redis

from crossdock.backends.redis_store import scripts
from crossdock.backends.redis_store.codec import STORE_FORMAT, hash_to_job
from crossdock.backends.redis_store.job_events import queue_job_event
from crossdock.backends.redis_store.sealing import SEAL
from crossdock.backends.redis_store.store import STREAM_MAXLEN, JobStore
from crossdock.queue.errors import CrossdockError, StoreUnavailable

log = logging.getLogger(__name__)

FORMAT = STORE_FORMAT
SEALED_ON_UPGRADE = "sealed_on_upgrade"
"""The event on each job whose spec :func:`ensure_format` sealed."""
LOCK_SECONDS = 30.0
"""The migration's lease: renewed every chunk of jobs, left to expire should its process die."""
WAIT_SECONDS = 120.0
"""How long a process waits for another's migration before giving up."""
_CHUNK = 200


class NewerStore(CrossdockError):
    """The store was written by a release newer than this one."""


def ensure_format(store: JobStore, wait: float = WAIT_SECONDS, clock: Callable[[], float] = time.monotonic,
                  pause: Callable[[float], None] = time.sleep) -> int:
    """Bring ``store`` to :data:`FORMAT`; the number of specs sealed here (0 when it already was, or
    another process did it). Needs the store's seals with the service's keys (``JobStore.seals``)."""
    if _current(store):
        return 0
    if store.seals is None:
        raise CrossdockError("the store was written by crossdock 0.1 (its job specs are unsealed): start the"
                             " service (crossdock up) once, which holds the key to seal them")
    holder, lease = uuid.uuid4().hex, store.r.register_script(scripts.LEASE)
    lease_ms = int(LOCK_SECONDS * 1000)
    deadline = clock() + wait
    while not lease(keys=[store.k.format_lock], args=[holder, lease_ms]):
        if _current(store):
            return 0
        if clock() > deadline:
            raise StoreUnavailable(f"another process has held {store.k.format_lock} (bringing the store to format"
                                   f" {FORMAT}) for over {wait:g}s; try again once it is done")
        pause(0.1)
    try:
        if _current(store):
            return 0
        ids = store.all_ids()
        sealed = 0
        for start in range(0, len(ids), _CHUNK):
            lease(keys=[store.k.format_lock], args=[holder, lease_ms])
            sealed += sum(_seal(store, job_id) for job_id in ids[start:start + _CHUNK])
        store.r.set(store.k.store_format, FORMAT)
    finally:
        store.r.register_script(scripts.RELEASE)(keys=[store.k.format_lock], args=[holder])
    log.info("store %s: format %d; sealed %d job specs stored unsealed by an earlier release", store.k.prefix,
             FORMAT, sealed)
    return sealed


def store_format(store: JobStore) -> int:
    """The store's format: 1 for a store without a format key (crossdock 0.1's)."""
    value = store.r.get(store.k.store_format)
    return int(value) if value is not None else 1


def _current(store: JobStore) -> bool:
    found = store_format(store)
    if found > FORMAT:
        raise NewerStore(f"the store {store.k.prefix!r} has format {found}, written by a newer crossdock; this one"
                         f" reads format {FORMAT}: run the release that wrote it")
    return found == FORMAT


def _seal(store: JobStore, job_id: int) -> int:
    """Seal job ``job_id``'s spec when it is unsealed (1), atomically with its event; else 0."""
    assert store.seals is not None
    key = store.k.job(job_id)
    with store.r.pipeline() as pipe:
        while True:
            try:
                pipe.watch(key)
                h = pipe.hgetall(key)
                if not h.get("spec") or h.get(SEAL):
                    return 0
                job = hash_to_job(job_id, h)
                fields = store.seals.fields(job)
                now = time.time()
                ev = {"event": SEALED_ON_UPGRADE, "actor": store.actor, "format": FORMAT, "time": now}
                pipe.multi()
                pipe.hset(key, mapping=fields)
                pipe.zadd(store.k.user_jobs(job.spec.user), {job_id: job_id})
                queue_job_event(store.r, pipe, store.k, job_id, ev, STREAM_MAXLEN, now=now)
                pipe.xadd(store.k.events, {"job": job_id, **ev}, maxlen=STREAM_MAXLEN, approximate=True)
                pipe.execute()
                return 1
            except redis.WatchError:
                continue

