"""Which Celery workers consume which dispatch queues, asked of the workers themselves.

A dispatch task waits in its backend's queue (``crossdock.<kind>``) until a worker consumes that
queue. A worker's queues are those it was started with plus those added while it runs; Celery's
remote control (pidbox) does both the asking and the adding, each worker answering for itself:

- :func:`add_queues`: ``add_consumer`` to one worker, by node name: the queues it confirmed;
- :func:`consumers`: ``inspect active_queues`` broadcast: queue → the workers consuming it.

A worker that does not answer within the timeout is left out (it consumes nothing, as far as
anyone can tell): ``crossdock health`` then flags the jobs waiting on its queues.
"""

from __future__ import annotations

import logging
from typing import Iterable

from celery import Celery

log = logging.getLogger(__name__)

ASK_SECONDS = 1.0
"""How long a worker has to answer (it usually does in milliseconds)."""


def add_queues(app: Celery, nodename: str, queues: Iterable[str], timeout: float = ASK_SECONDS) -> set[str]:
    """Ask worker ``nodename`` to consume ``queues`` too; the ones it confirmed (Celery answers
    ``ok`` for a queue it adds and for one it consumes already)."""
    confirmed: set[str] = set()
    for queue in sorted(set(queues)):
        replies = app.control.add_consumer(queue, destination=[nodename], reply=True, timeout=timeout) or []
        for reply in replies:
            answer = reply.get(nodename)
            if isinstance(answer, dict) and "ok" in answer:
                confirmed.add(queue)
            elif answer is not None:
                log.warning("worker %s refused to consume %s: %s", nodename, queue, answer)
    return confirmed


def consumers(app: Celery, timeout: float = ASK_SECONDS) -> dict[str, set[str]]:
    """Queue name → the node names of the workers that answered that they consume it."""
    answers = app.control.inspect(timeout=timeout).active_queues() or {}
    out: dict[str, set[str]] = {}
    for node, queues in answers.items():
        for queue in queues or []:
            out.setdefault(queue["name"], set()).add(node)
    return out
