"""What a Celery worker process loads (``celery -A crossdock.workers.worker worker``): the app,
pointed at the store this process's environment names, a watch on the process that started
it (``crossdock up``): the worker does not outlive it, and its metrics endpoint (the pool's
children record, the main process serves: prometheus-client's multiprocess mode, set up here
before anything imports it).

Celery's warning about running as root (``SecurityWarning``, from its privilege check) is
silenced here: crossdock's service runs as root on purpose, to run each local job as its owner,
and its tasks accept JSON only, where the check's real danger, pickle, is refused (Celery still
raises its ``SecurityError`` should pickle ever be accepted). ``start_worker`` passes
``--quiet``: no banner per worker in ``crossdock up``'s output."""

import logging
import os
import warnings

from crossdock import observe
from crossdock.observe import exporter
from crossdock.settings import Settings

_settings = Settings.from_env()
_multiproc = exporter.prepare_multiprocess(_settings.state_dir)

from celery.exceptions import SecurityWarning  # noqa: E402
from celery.signals import worker_init, worker_process_shutdown, worker_shutdown  # noqa: E402

from crossdock.backends.redis_store import upgrade  # noqa: E402
from crossdock.runtime import Runtime  # noqa: E402
from crossdock.workers.app import make_app  # noqa: E402
from crossdock.workers.supervision import watch_parent  # noqa: E402

warnings.filterwarnings("ignore", category=SecurityWarning)
log = logging.getLogger(__name__)
app = make_app(Runtime.from_env(start_redis=False).redis_url)
_exporter: list = []

WORKER_PORT_OFFSET = 1
"""``crossdock up`` serves the base port; its workers search from the next one."""


@worker_init.connect
def _die_with_parent(**_) -> None:
    watch_parent()


@worker_init.connect
def _store_format(**_) -> None:
    """A worker of its own (the Helm chart's) may start before the service: what the tasks it takes
    run is sealed first, were the store written by an earlier release (:mod:`.upgrade`)."""
    upgrade.ensure_format(Runtime.from_env(start_redis=False).store)


@worker_init.connect
def _serve_metrics(**_) -> None:
    try:
        base = exporter.resolve(Runtime.from_env(start_redis=False).config.metrics)
    except Exception as exc:  # noqa: BLE001 - a bad address or config: the worker works without metrics
        log.warning("metrics: not served: %s", exc)
        return
    if base is None:
        return
    observe.enable()  # the tasks' store (built in each child on first use) counts its round trips
    registry = exporter.multiprocess_registry() if _multiproc else None
    served = exporter.serve(base, "worker", WORKER_PORT_OFFSET, _settings.state_dir, registry)
    if served:
        _exporter.append(served)


@worker_process_shutdown.connect
def _child_gone(pid=None, **_) -> None:
    exporter.child_exited(pid or os.getpid())


@worker_shutdown.connect
def _stop_metrics(**_) -> None:
    for served in _exporter:
        served.stop()
