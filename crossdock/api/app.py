"""The REST API as a FastAPI app: ``create_app(rt)``; ``crossdock api`` serves it (see
:mod:`crossdock.api.serve`). Errors are JSON ``{"error": TYPE, "problems": [LINE, ...]}``:
401 no or a bad token, 403 refused (recorded as an event), 404 no such job, 400 refused by
admission or a bad argument (``LimitExceeded``: over one of the config's ``limits:``, named), 409
an illegal state change, 413 a body over ``limits.max_request_bytes``, 422 every problem of a body
at once, 503 the store does not answer."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles

from crossdock import __version__, service
from crossdock.api import cluster, jobs
from crossdock.api.auth import Unauthenticated
from crossdock.api.bodylimit import BodyLimit
from crossdock.gateway.direct import Direct
from crossdock.queue.config_limits import Limits
from crossdock.queue.errors import CrossdockError, IllegalTransition, NoSuchJob, PermissionDenied, StoreUnavailable
from crossdock.queue.submission import BadSubmission, problems
from crossdock.runtime import Runtime

log = logging.getLogger(__name__)
STATIC = Path(__file__).resolve().parent / "static"


def _error(status: int, kind: str, lines: list[str], headers: dict[str, str] | None = None) -> JSONResponse:
    return JSONResponse({"error": kind, "problems": lines}, status_code=status, headers=headers)


def create_app(rt: Runtime | None, send: Any = None) -> FastAPI:
    """The API over ``rt``'s store and config (None: for its schema alone); ``send`` (a Celery
    sender) is made on first use."""
    app = FastAPI(title="crossdock", version=__version__,
                  description="One batch queue in front of Slurm, Kubernetes and this machine. Authenticate with"
                              " `Authorization: Bearer <token>` (`crossdock tokens create USER`), or through the"
                              " API's Unix socket (the kernel says who you are).")
    app.state.rt = rt
    app.state.send = Direct(rt, service.Caller("crossdock", True), send).send  # one Celery producer for all requests
    app.add_middleware(BodyLimit, limits=lambda: rt.config.limits if rt is not None else Limits())
    app.include_router(jobs.router)
    app.include_router(cluster.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def dashboard() -> FileResponse:
        return FileResponse(STATIC / "index.html")

    @app.get("/healthz", tags=["cluster"], summary="The API answers, and whether its store does")
    def healthz() -> JSONResponse:
        try:
            rt.store.ping()
        except StoreUnavailable as exc:
            cause = exc.__cause__ or exc
            return _error(503, "ServiceUnavailable", [f"the store does not answer ({type(cause).__name__})"])
        return JSONResponse({"status": "ok"})

    @app.exception_handler(Unauthenticated)
    def unauthenticated(request: Request, exc: Unauthenticated) -> JSONResponse:
        log.info("401 %s %s: %s", request.method, request.url.path, exc)
        return _error(401, "Unauthenticated", [str(exc)], {"WWW-Authenticate": "Bearer"})

    @app.exception_handler(RequestValidationError)
    def invalid_request(request: Request, exc: RequestValidationError) -> JSONResponse:
        kind = "InvalidSubmission" if request.url.path == "/v1/jobs" else "InvalidArgument"
        return _error(422, kind, problems(exc.errors()))

    @app.exception_handler(BadSubmission)
    def bad_submission(request: Request, exc: BadSubmission) -> JSONResponse:
        return _error(422, "InvalidSubmission", exc.problems)

    @app.exception_handler(CrossdockError)
    def refused(request: Request, exc: CrossdockError) -> JSONResponse:
        if isinstance(exc, StoreUnavailable):
            return _error(503, "ServiceUnavailable", [str(exc)])
        if isinstance(exc, PermissionDenied):
            log.info("403 %s %s: %s", request.method, request.url.path, exc)
            return _error(403, "PermissionDenied", [str(exc)])
        if isinstance(exc, NoSuchJob):
            return _error(404, "NoSuchJob", [f"{exc}; give a job id such as 12, an array task 12_3, or an array 12"])
        status = 409 if isinstance(exc, IllegalTransition) else 400
        return _error(status, type(exc).__name__, list(getattr(exc, "errors", None) or [str(exc)]))

    return app

