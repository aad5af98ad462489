"""The cluster's endpoints: who am I, queues, pools and nodes, the autoscaler, the descheduler,
and the dashboard's one-call overview of them all."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any

from fastapi import APIRouter, Depends, Query, Request

from crossdock import service
from crossdock.api import views
from crossdock.api.jobs import view
from crossdock.backends.redis_store.autoscale import EVENTS as SCALING_EVENTS
from crossdock.gateway.direct import Direct

router = APIRouter(prefix="/v1", tags=["cluster"])
RECENT_EVENTS = 2000
"""How far back in the global stream the overview looks for preemptions, migrations and scaling."""
OVERVIEW_JOBS = 200


@router.get("/whoami", summary="Who the API takes you for, and how it knows")
def whoami(request: Request, gw: Direct = Depends(view)) -> dict[str, Any]:
    return {"user": gw.who.name, "admin": gw.who.admin, "via": request.state.via}


def _placed_and_pending(gw: Direct) -> tuple[list, list]:
    store = gw.rt.store
    return store.get_many(store.pending_ids()), store.get_many(store.active_ids())


@router.get("/queues", summary="Queues with depth (pending, held, running) and wait")
def queues(gw: Direct = Depends(view)) -> list[dict[str, Any]]:
    pending, active = _placed_and_pending(gw)
    return views.queue_rows(gw.rt.config, pending, active, datetime.now(timezone.utc))


@router.get("/pools", summary="Pools and nodes with CPU, memory and GPU use per model (fragmentation)")
def pools(gw: Direct = Depends(view)) -> list[dict[str, Any]]:
    return views.pool_view(gw.inventory(), gw.rt.store.get_many(gw.rt.store.active_ids()))


@router.get("/autoscaler", summary="The autoscaler's last pass: every fleet's and pool's decision and last change")
def autoscaler(gw: Direct = Depends(view)) -> dict[str, Any]:
    return service.autoscaling(gw.rt)


@router.get("/descheduler", summary="The descheduler's config and last pass (disabled where it does not run)")
def descheduler(gw: Direct = Depends(view)) -> dict[str, Any]:
    return views.descheduler_status(gw.rt)


@router.get("/overview", summary="Everything the dashboard shows, in one call")
def overview(gw: Direct = Depends(view), jobs: int = Query(OVERVIEW_JOBS, ge=1, le=5000)) -> dict[str, Any]:
    store, now = gw.rt.store, datetime.now(timezone.utc)
    pending, active = _placed_and_pending(gw)
    recent = gw.jobs(store.all_ids(limit=jobs))
    events = gw.event_stream([], None, None, RECENT_EVENTS, None)["events"]
    return {
        "at": time.time(),
        "user": {"name": gw.who.name, "admin": gw.who.admin},
        "queues": views.queue_rows(gw.rt.config, pending, active, now),
        "jobs": [views.job_json(j) for j in reversed(recent)],
        "pools": views.pool_view(gw.inventory(), active),
        "disruptions": views.disruptions(events)[-50:],
        "autoscaler": service.autoscaling(gw.rt),
        "scaling_events": [e for e in events if e.get("event") in SCALING_EVENTS][-50:],
        "descheduler": views.descheduler_status(gw.rt),
        "services": views.service_rows(store.services.list()),
    }
