"""The runner of a Python job on every remote backend: ``python -m crossdock.workers.pyjob``.

Run in the job's own environment (a Slurm batch step, a Kubernetes container). It reads its job
from the store (``CROSSDOCK_JOB_ID``; an array task finds its own record by
``SLURM_ARRAY_TASK_ID``), checks the call's seals and runs it as the local runner does
(:func:`crossdock.pycall.run_call`), then stores the sealed outcome (the return value, or the
exception with its remote traceback) under the task's job id, where ``result()`` reads it. The
store and the signing key come from ``CROSSDOCK_REDIS_URL``, ``CROSSDOCK_PREFIX`` and
``CROSSDOCK_STATE_DIR`` (or ``CROSSDOCK_SIGNING_KEY``), which the client puts in a Python job's
environment. What the call prints is kept in the store (:mod:`crossdock.backends.joboutput`)
and still reaches the job's own output. A callable with a ``checkpoint()`` hook that is stopped
(SIGTERM: preemption, the time limit) stores the call the hook returned, sealed, for the next
attempt. Exit status 0 when the call returned, 1 when it raised or its value could not be
stored, 2 when the job cannot be read or its payload is refused, 128 + the signal when stopped.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping

from crossdock import signing
from crossdock.backends.joboutput import captured
from crossdock.backends.pypayload import checkpoint_context, verified_payload
from crossdock.pycall import Stopped, result_limit, run_payload
from crossdock.queue.errors import CrossdockError
from crossdock.queue.models import Job
from crossdock.runtime import Runtime


def own_job(store, environ: Mapping[str, str]) -> Job:
    """This process's job: ``CROSSDOCK_JOB_ID``'s; in an array submitted in one piece (a Slurm
    array names ``CROSSDOCK_ARRAY_JOB_ID``, a Kubernetes Indexed Job its first task's id), the
    task of that array that ``SLURM_ARRAY_TASK_ID`` names."""
    task = environ.get("SLURM_ARRAY_TASK_ID", "")
    if "CROSSDOCK_JOB_ID" not in environ and "CROSSDOCK_ARRAY_JOB_ID" in environ and task.isdigit():
        return store.get(store.resolve(f"{int(environ['CROSSDOCK_ARRAY_JOB_ID'])}_{int(task)}")[0])
    job = store.get(int(environ["CROSSDOCK_JOB_ID"]))
    if job.array_job_id is not None and task.isdigit() and int(task) != job.array_task_id:
        job = store.get(store.resolve(f"{job.array_job_id}_{int(task)}")[0])
    return job


def run(rt: Runtime, environ: Mapping[str, str]) -> int:
    store, state_dir = rt.store, rt.settings.state_dir
    try:
        job = own_job(store, environ)
        payload = verified_payload(store, state_dir, job)
    except (CrossdockError, KeyError, ValueError) as exc:
        print(f"crossdock: cannot run this Python job: {exc}", file=sys.stderr)
        return 2
    key = signing.user_key(state_dir, job.spec.user)

    def save(text: str) -> None:
        store.set_checkpoint(job.id, signing.seal(key, checkpoint_context(job.id), text.encode()))

    with captured(store, job.id):
        try:
            # a module missing in the job's environment is the job's error
            outcome, ok = run_payload(payload, result_limit(dict(environ)), save, name=job.spec.python.qualname)
        except Stopped as stop:
            return 128 + stop.signum
    store.set_result(job.id, signing.seal(key, f"result:{job.id}", outcome))
    return 0 if ok else 1


def main() -> int:
    return run(Runtime.from_env(start_redis=False), os.environ)


if __name__ == "__main__":
    sys.exit(main())
