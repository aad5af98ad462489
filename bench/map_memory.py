"""Redis bytes per ``map`` task: ``python bench/map_memory.py [--inputs 50] [--size 20000]``.

Submits one map of ``--inputs`` inputs of ``--size`` random bytes each to a fresh embedded Redis
(no scheduler: the jobs stay queued) and prints the growth of the server's ``used_memory`` (the
store's :meth:`used_memory`) per task and its ratio to the input size.
"""

from __future__ import annotations

import argparse
import os
import tempfile
import uuid
from pathlib import Path

import yaml


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--inputs", type=int, default=50)
    ap.add_argument("--size", type=int, default=20_000)
    a = ap.parse_args()
    from crossdock.backends.redis_store import embedded

    with tempfile.TemporaryDirectory(prefix="cd-mapmem-", ignore_cleanup_errors=True) as tmp:
        state = Path(tmp)
        cfg = state / "crossdock.yaml"
        cfg.write_text(yaml.safe_dump({"priority_classes": {"batch": {"value": 500}},
                                       "pools": {"local": {"backend": "local"}}, "default_queue": "batch",
                                       "queues": {"batch": {"priority_class": "batch", "pools": ["local"]}}}))
        url = embedded.ensure_running(state / "redis")
        os.environ.update({"CROSSDOCK_REDIS_URL": url, "CROSSDOCK_STATE_DIR": str(state),
                           "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_PREFIX": f"m{uuid.uuid4().hex[:8]}"})
        try:
            from crossdock.client import Client

            client = Client()
            inputs = [os.urandom(a.size) for _ in range(a.inputs)]
            before = client.runtime.store.used_memory()
            client.map(len, inputs)
            grown = client.runtime.store.used_memory() - before
            print(f"{a.inputs} inputs of {a.size} B: Redis grew {grown} B, {grown // a.inputs} B per task"
                  f" ({grown / a.inputs / a.size:.2f}x the input)")
        finally:
            embedded.stop(state / "redis")


if __name__ == "__main__":
    main()
