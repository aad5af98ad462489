"""A running crossdock for the backend benchmarks: its own embedded Redis and state directory,
the scheduler loop in a thread and a Celery worker process, configured by the caller."""

from __future__ import annotations

import os
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

import yaml


class CrossdockService:
    def __init__(self, config: dict[str, Any], env: dict[str, str], reconcile: float, workers: int = 2) -> None:
        from crossdock.backends.redis_store import embedded

        self.state = Path(tempfile.mkdtemp(prefix="crossdock-bench-state-"))
        self.redis_url = embedded.ensure_running(self.state / "redis")
        cfg = self.state / "crossdock.yaml"
        cfg.write_text(yaml.safe_dump(config))
        os.environ.update({"CROSSDOCK_REDIS_URL": self.redis_url, "CROSSDOCK_STATE_DIR": str(self.state),
                           "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_PREFIX": f"b{uuid.uuid4().hex[:8]}", **env})
        from crossdock.workers.supervision import start_worker
        from crossdock.client import Client
        from crossdock.runtime import Runtime
        from crossdock.workers.app import celery_sender, make_app
        from crossdock.workers.leader import Scheduler

        self.rt = Runtime.from_env()
        self.client = Client(self.rt)
        self.worker = start_worker(self.rt, workers, self.state / "worker.log", loglevel="WARNING")
        self.stop_event = threading.Event()
        sched = Scheduler(self.rt, celery_sender(make_app(self.redis_url)))
        self.thread = threading.Thread(target=sched.run, args=(self.stop_event, reconcile), daemon=True)
        self.thread.start()

    def close(self) -> None:
        from crossdock.backends.redis_store import embedded
        from crossdock.workers.supervision import stop_worker

        self.stop_event.set()
        self.thread.join(10)
        stop_worker(self.worker, 15)
        embedded.stop(self.state / "redis")
