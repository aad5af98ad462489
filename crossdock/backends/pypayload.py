"""A Python job's call as its runner reads it from the store, every seal checked.

A ``submit`` carries its call in the spec (``PythonCall.payload``, sealed beside it); a ``map``
task finds its function and its own arguments among the array's parts
(:meth:`JobResults.call_parts`), each sealed under its owner's key with a context naming the part,
so that no part is unpickled unless its owner's client wrote it. A job stopped while its
callable's ``checkpoint()`` hook was armed resumes from the call the hook returned, which its
runner stored sealed under the owner's key (:meth:`JobResults.set_checkpoint`).
"""

from __future__ import annotations

from pathlib import Path

from crossdock import signing
from crossdock.pycall import join_parts
from crossdock.queue.errors import BadSignature
from crossdock.queue.jobstore import JobResults
from crossdock.queue.models import Job


def fn_context(ref: str) -> str:
    return f"fn:{ref}"


def args_context(ref: str, task_id: int) -> str:
    return f"args:{ref}:{task_id}"


def checkpoint_context(job_id: int) -> str:
    return f"checkpoint:{job_id}"


def verified_payload(store: JobResults, state_dir: Path, job: Job) -> str:
    """The payload text for :func:`crossdock.pycall.decode_call` (the checkpointed call, when the
    job left one); :class:`BadSignature` when a part is missing, unsigned or forged."""
    spec = job.spec
    what = f"the Python payload of job {job.display_id}"
    if spec.python is None:
        raise ValueError(f"job {job.display_id} is not a Python job")
    resumed = store.checkpoint(job.id) if store is not None else None
    if resumed is not None:
        key = signing.user_key(state_dir, spec.user)
        what = f"the checkpoint of job {job.display_id}"
        return signing.unseal(key, checkpoint_context(job.id), resumed, what).decode()
    if not spec.python.parts:
        signing.check_payload(state_dir, spec, what)
        return spec.python.payload
    ref, task = spec.python.parts, job.array_task_id or 0
    fn, args = store.call_parts(ref, "fn", str(task))
    if fn is None or args is None:
        raise BadSignature(f"{what} is not in the store (expired, or removed); submit it again")
    key = signing.user_key(state_dir, spec.user)
    return join_parts(signing.unseal(key, fn_context(ref), fn, what),
                      signing.unseal(key, args_context(ref, task), args, what))
