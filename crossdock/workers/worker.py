"""What a Celery worker process loads (``celery -A crossdock.workers.worker worker``): the app,
pointed at the store this process's environment names, and a watch on the process that started
it (``crossdock up``): the worker does not outlive it."""

from celery.signals import worker_init

from crossdock.runtime import Runtime
from crossdock.workers.app import make_app
from crossdock.workers.supervision import watch_parent

app = make_app(Runtime.from_env(start_redis=False).redis_url)


@worker_init.connect
def _die_with_parent(**_) -> None:
    watch_parent()
