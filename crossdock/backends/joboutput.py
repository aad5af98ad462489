"""What a Python job prints, kept in the store (``crossdock logs``, ``handle.logs()``, REST).

A Python job's runner writes its stdout and stderr (its own and its children's: the descriptors
themselves) to one file; an :class:`OutputPump` copies what is appended there to the store's
output of the job (:meth:`JobOutput.append_output`), every attempt's in turn, and to the job's own
output file when it has one (``options(stdout=...)``; a pod's log). The local supervisor pumps at
each heartbeat; a remote runner (:mod:`crossdock.workers.pyjob`) from a thread
(:func:`captured`). What is kept stops at ``CROSSDOCK_OUTPUT_MAX_BYTES`` characters (default 16 Mi),
with a line that says so; the job's own output file still gets it all.
"""

from __future__ import annotations

import codecs
import contextlib
import logging
import os
import sys
import tempfile
import threading
from pathlib import Path
from typing import Iterator

from crossdock.queue.jobstore import JobOutput

log = logging.getLogger(__name__)

LIMIT_ENV = "CROSSDOCK_OUTPUT_MAX_BYTES"
DEFAULT_LIMIT = 16 * 1024 * 1024
READ_BYTES = 1 << 20
PUMP_SECONDS = 1.0


def output_limit(environ: dict[str, str] | None = None) -> int:
    text = (environ if environ is not None else os.environ).get(LIMIT_ENV, "")
    return int(text) if text.strip().isdigit() else DEFAULT_LIMIT


class OutputPump:
    """Copies the bytes appended to ``path`` to the store's output of ``job_id`` (as text; a
    character cut between two reads waits for its end) and to descriptor ``forward``. A store
    that does not answer raises from :meth:`pump`; what it missed goes with the next pump."""

    def __init__(self, store: JobOutput, job_id: int, path: Path, forward: int | None = None,
                 limit: int = DEFAULT_LIMIT):
        self.store, self.job_id, self.path, self.forward, self.limit = store, job_id, path, forward, limit
        self.pos = self.kept = 0
        self.unsent: list[str] = []
        self.full = False
        self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    def pump(self, final: bool = False) -> None:
        try:
            with open(self.path, "rb") as f:
                f.seek(self.pos)
                while data := f.read(READ_BYTES):
                    self.pos += len(data)
                    self._take(data)
        except FileNotFoundError:
            pass
        if final:
            self._keep(self.decoder.decode(b"", final=True))
        if self.unsent:
            self.store.append_output(self.job_id, self.unsent)
            self.unsent = []

    def _take(self, data: bytes) -> None:
        if self.forward is not None:
            with contextlib.suppress(OSError):  # a closed or full output file loses its copy, not the store's
                view = memoryview(data)
                while view:
                    view = view[os.write(self.forward, view):]
        self._keep(self.decoder.decode(data))

    def _keep(self, text: str) -> None:
        if not text or self.full:
            return
        room = self.limit - self.kept
        if len(text) > room:
            text = (text[:room] + f"\n[crossdock: the output is over {self.limit} characters ({LIMIT_ENV});"
                    " the rest is not kept]\n")
            self.full = True
        self.kept += len(text)
        self.unsent.append(text)


@contextlib.contextmanager
def captured(store: JobOutput, job_id: int) -> Iterator[None]:
    """Within: this process's stdout and stderr (descriptors 1 and 2) go to a private file that a
    thread pumps to the store each second, and on to the original stdout; restored on exit after
    a last pump. Without a writable temporary directory, nothing is kept (and it says so)."""
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    try:
        fd, name = tempfile.mkstemp(prefix=f"crossdock-{job_id}-", suffix=".out")
    except OSError as exc:  # no writable temporary directory here: the output stays the job's own
        print(f"crossdock: the output of job {job_id} is not kept ({exc})", file=sys.stderr)
        yield
        return
    saved = os.dup(1), os.dup(2)
    pump = OutputPump(store, job_id, Path(name), forward=saved[0], limit=output_limit())
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(PUMP_SECONDS):
            try:
                pump.pump()
            except Exception as exc:  # noqa: BLE001 - the store away for a while: the next pump sends it
                log.debug("output of job %s not sent yet: %s", job_id, exc)

    os.dup2(fd, 1)
    os.dup2(fd, 2)
    sys.stdout.reconfigure(line_buffering=True)  # type: ignore[union-attr]
    thread = threading.Thread(target=run, name="crossdock-output", daemon=True)
    thread.start()
    try:
        yield
    finally:
        for stream in (sys.stdout, sys.stderr):
            stream.flush()
        stop.set()
        thread.join()
        os.dup2(saved[0], 1)
        os.dup2(saved[1], 2)
        try:
            pump.pump(final=True)
        finally:
            os.close(fd)
            os.unlink(name)
            for d in saved:
                os.close(d)
