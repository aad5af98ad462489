"""The Celery app. Dispatch, cancel and preempt are tasks routed to one queue per backend.

Tasks are acknowledged late (after they ran) and rejected when their worker dies, so a task
can run twice after a crash or a visibility timeout; every task is idempotent for that reason.
The job store, not Celery's result backend, is the source of truth: results are ignored.
"""

from __future__ import annotations

from celery import Celery

from crossdock.runtime import Runtime, celery_url

QUEUE_PREFIX = "crossdock"


def queue_for(backend: str) -> str:
    return f"{QUEUE_PREFIX}.{backend}"


def make_app(redis_url: str) -> Celery:
    url = celery_url(redis_url)
    app = Celery("crossdock", broker=url, include=["crossdock.workers.tasks"])
    app.conf.update(
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        task_ignore_result=True,
        worker_prefetch_multiplier=1,
        task_default_queue=queue_for("local"),
        broker_transport_options={"visibility_timeout": 3600},
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
        task_serializer="json",
        accept_content=["json"],
    )
    return app


app = make_app(Runtime.from_env().redis_url)
