"""The jobs' endpoints: submit, list, show, cancel, hold, release, requeue, logs, events, history.

Each is one :class:`~crossdock.gateway.direct.Direct` call for the request's caller, as the
multi-user socket serves it: the admission, ownership checks and messages are the service's.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import stat
from pathlib import Path
from typing import Any, AsyncIterator, Literal

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from crossdock import service
from crossdock.api.auth import caller
from crossdock.api.views import job_json
from crossdock.gateway.direct import ALL_LIMIT, Direct
from crossdock.queue.environ import exportable
from crossdock.queue.errors import InvalidArgument, PermissionDenied
from crossdock.queue.models import Job
from crossdock.queue.sbatch_formats import export_environment
from crossdock.queue.sbatch_json import dry_run_json
from crossdock.queue.states import JobState
from crossdock.queue.submission import Accepted, Submission, to_spec

router = APIRouter(prefix="/v1", tags=["jobs"])
FOLLOW_POLL_SECONDS = 0.5
STATE_CODES = {"PD": JobState.PENDING, "R": JobState.RUNNING, "CD": JobState.COMPLETED, "F": JobState.FAILED,
               "CA": JobState.CANCELLED, "TO": JobState.TIMEOUT}


async def view(request: Request, who: service.Caller = Depends(caller)) -> Direct:
    """The service as this request's caller sees it."""
    return Direct(request.app.state.rt, who, request.app.state.send)


def _workdir(spec_workdir: str | None, user: str) -> str:
    """The job's working directory: as given (absolute), else its owner's home, as sbatch's is
    the submitter's current directory (a REST client has none here)."""
    if spec_workdir:
        if not os.path.isabs(spec_workdir):
            raise InvalidArgument(f"chdir: {spec_workdir!r} is relative; give an absolute path (the API has no"
                                  " current directory of yours)")
        return spec_workdir
    try:
        return pwd.getpwnam(user).pw_dir
    except KeyError:
        raise InvalidArgument(f"chdir: not given, and {user!r} has no home directory here; give the job's"
                              " working directory") from None


@router.post("/jobs", status_code=201, response_model=Accepted | list[dict[str, Any]],
             summary="Submit a job (the JSON `crossdock submit --dry-run --json` prints)",
             responses={400: {"description": "refused by admission (LimitExceeded: over a limits: key, named)"},
                        403: {"description": "not yours to submit"},
                        413: {"description": "a body over limits.max_request_bytes"},
                        422: {"description": "the body's problems, every one"}})
def submit(body: Submission, gw: Direct = Depends(view),
           dry_run: bool = Query(False, description="admit as a submission is, store nothing; answer the"
                                                    " normalized spec as `--dry-run --json` prints it"),
           idempotency_key: str | None = Header(None, description="the same key twice stores the job once; a key is"
                                                                  " its user's own (another's same key is another job)")) -> Any:
    spec = to_spec(body)
    user = spec.user or gw.who.name
    # What --export asks for, from what the request carries (a REST client has no environment
    # here, and the service's never travels); crossdock's secrets never.
    env = exportable(export_environment(spec.export, spec.env, {}))
    spec = spec.model_copy(update={"env": env, "workdir": _workdir(spec.workdir, user)})
    try:
        if dry_run:
            gw.check([spec])
            return JSONResponse([dry_run_json(spec)])
        jobs = gw.submit([spec], token=idempotency_key)
    except PermissionDenied as exc:
        gw.rt.store.access.record_refusal(gw.who.name, "submit", str(exc))
        raise
    first = jobs[0].array_job_id if jobs[0].array_job_id is not None else jobs[0].id
    # a response as it is: no second validation of it, in a worker thread of its own
    return JSONResponse({"job_id": first, "jobs": [j.id for j in jobs]}, status_code=201)


@router.get("/jobs", summary="List jobs (squeue): pending and running, or every one with which=all")
def list_jobs(gw: Direct = Depends(view),
              which: Literal["queued", "all"] = Query("queued"),
              state: str | None = Query(None, description="comma list: PD,R,CD,F,CA,TO or state names"),
              user: str | None = Query(None, description="comma list of users"),
              queue: str | None = Query(None, description="comma list of queues"),
              after: int = Query(0, ge=0, description="with which=all: only ids above this (paging)"),
              limit: int = Query(500, ge=1, le=ALL_LIMIT)) -> list[dict[str, Any]]:
    states = None if state is None else {_state(s) for s in state.split(",") if s}
    users = None if user is None else set(user.split(","))
    queues = None if queue is None else set(queue.split(","))
    ids = gw.ids_after(after, limit) if which == "all" else gw.ids("queued")
    out = []
    for j in gw.jobs(ids):
        if (states and j.state not in states) or (users and j.spec.user not in users) or (queues and j.queue not in queues):
            continue
        out.append(job_json(j))
        if len(out) >= limit:
            break
    return out


def _state(text: str) -> JobState:
    code = text.strip().upper()
    if code in STATE_CODES:
        return STATE_CODES[code]
    try:
        return JobState(code)
    except ValueError:
        raise InvalidArgument(f"state: {text!r} is not a job state; accepted: {', '.join(STATE_CODES)} or"
                              f" {', '.join(s.value for s in JobState)}") from None


def _refs(ref: str) -> list[str]:
    return [p for p in ref.split(",") if p]


@router.get("/jobs/{ref}", summary="Show jobs: an id (12), an array task (12_3) or a whole array (12)")
def show(ref: str, gw: Direct = Depends(view)) -> list[dict[str, Any]]:
    return [job_json(j) for j in gw.jobs([i for r in _refs(ref) for i in gw.resolve(r)])]


def _outcomes(pairs: list[tuple[Job, bool]], verb: str) -> list[dict[str, Any]]:
    return [{"job": j.display_id, "done": done, "outcome": verb if done else f"not {verb} (state {j.state.value})"}
            for j, done in pairs]


@router.post("/jobs/{ref}/cancel", summary="Cancel jobs (scancel)")
def cancel(ref: str, gw: Direct = Depends(view)) -> list[dict[str, Any]]:
    return [{"job": job, "done": True, "outcome": outcome} for job, outcome in gw.cancel(_refs(ref))]


@router.delete("/jobs/{ref}", summary="Cancel jobs (as POST /jobs/{ref}/cancel)")
def delete(ref: str, gw: Direct = Depends(view)) -> list[dict[str, Any]]:
    return cancel(ref, gw)


@router.post("/jobs/{ref}/hold", summary="Keep pending jobs from starting (scontrol hold)")
def hold(ref: str, gw: Direct = Depends(view)) -> list[dict[str, Any]]:
    return _outcomes(gw.hold(_refs(ref), True), "held")


@router.post("/jobs/{ref}/release", summary="Let held jobs start (scontrol release)")
def release(ref: str, gw: Direct = Depends(view)) -> list[dict[str, Any]]:
    return _outcomes(gw.hold(_refs(ref), False), "released")


@router.post("/jobs/{ref}/requeue", summary="Put running or finished jobs back in the queue (scontrol requeue)")
def requeue(ref: str, gw: Direct = Depends(view)) -> list[dict[str, Any]]:
    return _outcomes(gw.requeue(_refs(ref)), "requeued")


@router.get("/jobs/{job_id}/why", summary="Why a pending job pends, and the changes that would start it sooner")
def job_why(job_id: int, gw: Direct = Depends(view)) -> dict[str, Any]:
    """``crossdock why``: the scheduler's reason, the start it predicts as the job is, and each
    one-edit change (fewer GPUs, another model, pool or queue, a shorter time limit) with the start
    it predicts for it, soonest first. Its owner's or an admin's."""
    return gw.why(job_id)


@router.get("/jobs/{job_id}/events", summary="One job's events: who did what, when, why")
def job_events(job_id: int, gw: Direct = Depends(view),
               count: int = Query(1000, ge=1, le=10_000)) -> list[dict[str, str]]:
    gw.job(job_id)  # NoSuchJob: 404
    return gw.event_stream([job_id], None, None, count, None)["events"]


@router.get("/jobs/{job_id}/logs", response_class=StreamingResponse, summary="A job's output, streamed",
            responses={200: {"content": {"text/plain": {}}, "description": "the output; with follow, until the job ends"}})
def logs(job_id: int, gw: Direct = Depends(view), follow: bool = Query(False, description="stream until the job ends"),
         stderr: bool = Query(False, description="the error file, where it differs")) -> StreamingResponse:
    from crossdock.backends.local.environment import output_paths

    job = gw.rt.store.get(job_id)  # whole: its output paths (the owner's, once allowed)
    gw.may_read_output(job)
    served = gw.backend_logs(job.id)  # a pod's log, as its backend serves it
    if served is not None:  # a Python job's kept output, a pod's log
        return StreamingResponse(_served(gw, job.id, served, follow), media_type="text/plain; charset=utf-8")
    out, err = output_paths(job, job.nodes[0] if job.nodes else "localhost")
    path, uid = (err if stderr else out), _owner_uid(job)
    try:
        first = _read_from(path, 0, uid)
    except PermissionDenied as exc:
        gw.rt.store.access.record_refusal(gw.who.name, "read the output of", str(exc), job.id)
        raise
    return StreamingResponse(_tail(gw, job.id, path, uid, first, follow), media_type="text/plain; charset=utf-8")


async def _served(gw: Direct, job_id: int, first: str, follow: bool) -> AsyncIterator[bytes]:
    """What the service serves of a job's output; with ``follow``, what each read adds, until the job has ended."""
    shown = first
    yield first.encode()
    while follow:
        ended = (await run_in_threadpool(gw.job, job_id)).state.terminal
        now = await run_in_threadpool(gw.backend_logs, job_id) or ""
        yield (now[len(shown):] if now.startswith(shown) else now).encode()
        shown = now
        if ended:
            return
        await asyncio.sleep(FOLLOW_POLL_SECONDS)


def _owner_uid(job: Job) -> int | None:
    """Whose file a job's output must be for the API to serve it: its owner's when the API runs
    as root (which reads any file, so an output path naming another's file, or a link to one,
    would have it read for the user); None when it runs as the jobs' own user."""
    if os.geteuid() != 0:
        return None
    try:
        return pwd.getpwnam(job.spec.user).pw_uid
    except KeyError:
        raise PermissionDenied(f"read the output of job {job.display_id}: its owner {job.spec.user!r} has no"
                               " account here") from None


async def _tail(gw: Direct, job_id: int, path: Path, uid: int | None, first: bytes,
                follow: bool) -> AsyncIterator[bytes]:
    """The file's bytes as they come; with ``follow``, until the job has ended and all is read."""
    chunk, pos = first, 0
    while True:
        pos += len(chunk)
        if chunk:
            yield chunk
        if not follow and len(chunk) < READ_BYTES:
            return
        if follow and (await run_in_threadpool(gw.job, job_id)).state.terminal:
            while rest := await run_in_threadpool(_read_from, path, pos, uid):
                pos += len(rest)
                yield rest
            return
        if follow and len(chunk) < READ_BYTES:
            await asyncio.sleep(FOLLOW_POLL_SECONDS)
        try:
            chunk = await run_in_threadpool(_read_from, path, pos, uid)
        except PermissionDenied:  # the file was replaced by one that is not the owner's
            return


READ_BYTES = 1 << 20


def _read_from(path: Path, pos: int, uid: int | None) -> bytes:
    """Up to :data:`READ_BYTES` of a regular file (no link) from ``pos``; with ``uid``, only of a
    file that user owns; nothing while it does not exist."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return b""
    except OSError as exc:
        raise PermissionDenied(f"the output file {str(path)!r} cannot be served ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (uid is not None and st.st_uid != uid):
            raise PermissionDenied(f"the output file {str(path)!r} is not a file of the job's owner; not served")
        f.seek(pos)
        return f.read(READ_BYTES)


@router.get("/history", summary="Expired jobs' records (sacct's window)")
def history(gw: Direct = Depends(view), since: float | None = Query(None, description="epoch seconds")) -> list[dict[str, Any]]:
    return gw.history(since)


@router.get("/events", summary="The global event stream: every job's transitions, refusals, autoscaler changes")
def events(gw: Direct = Depends(view), after: str | None = Query(None, pattern=r"^\d+(-\d+)?$",
                                                                 description="an event id; only those after it"),
           job: int | None = Query(None, description="only this job's events"),
           count: int = Query(200, ge=1, le=10_000)) -> list[dict[str, str]]:
    return gw.event_stream([] if job is None else [job], None, after, count, None)["events"]
