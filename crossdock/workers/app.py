"""The Celery app factory. Dispatch, cancel and preempt are tasks routed to one queue per backend.

Tasks are acknowledged late (after they ran) and rejected when their worker dies, so a task
can run twice after a crash or a visibility timeout; every task is idempotent for that reason.
The job store, not Celery's result backend, is the source of truth: results are ignored.
Nothing connects or starts when this module is imported; ``crossdock.workers.worker`` is what a
Celery worker process loads.
"""

from __future__ import annotations

import os
from typing import Callable

from celery import Celery

from crossdock.backends.redis_store import durability
from crossdock.backends.redis_store.connect import is_sentinel, kombu_broker

QUEUE_PREFIX = "crossdock"
EVENTS_ENV = "CROSSDOCK_CELERY_EVENTS"
"""1: workers send Celery's task events and senders the task-sent event (what Flower shows)."""


def queue_for(backend: str) -> str:
    return f"{QUEUE_PREFIX}.{backend}"


def celery_url(redis_url: str) -> str:
    """Celery (kombu) spells a unix-socket Redis ``redis+socket://`` and Sentinel ``sentinel://h:p;…``.
    The store's durable writes are the store's: Celery's messages, which the follower resends when
    lost, get the URL without them."""
    redis_url = durability.split(redis_url)[0]
    if redis_url.startswith("unix://"):
        return "redis+socket://" + redis_url.removeprefix("unix://")
    if is_sentinel(redis_url):
        return kombu_broker(redis_url)[0]
    return redis_url


def transport_options(redis_url: str) -> dict:
    """The broker's transport options: tasks redelivered after an hour unacknowledged; under
    Sentinel, the master's name (and the sentinels' password)."""
    options = {"visibility_timeout": 3600}
    if is_sentinel(redis_url):
        options.update(kombu_broker(redis_url)[1])
    return options


def make_app(redis_url: str) -> Celery:
    url = celery_url(redis_url)
    app = Celery("crossdock", broker=url, include=["crossdock.workers.tasks"])
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        worker_prefetch_multiplier=1,
        task_default_queue=queue_for("local"),
        broker_transport_options=transport_options(redis_url),
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_serializer="json",
        accept_content=["json"],
    )
    if os.environ.get(EVENTS_ENV, "").lower() in ("1", "true", "yes"):
        app.conf.update(worker_send_task_events=True, task_send_sent_event=True)
    return app


SendTask = Callable[[str, list, str], None]
"""Send a task by name with its arguments to the queue of a backend kind."""


def celery_sender(app: Celery) -> SendTask:
    def send(name: str, args: list, backend_kind: str) -> None:
        app.send_task(name, args=args, queue=queue_for(backend_kind))

    return send
