"""What a Celery worker process loads (``celery -A crossdock.workers.worker worker``): the app,
pointed at the store this process's environment names."""

from crossdock.runtime import Runtime
from crossdock.workers.app import make_app

app = make_app(Runtime.from_env(start_redis=False).redis_url)
