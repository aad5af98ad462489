"""compose.yaml is accepted by the Docker Compose client and has the services users expect."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def compose_cli() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_client_accepts_the_file():
    cli = compose_cli()
    if cli is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no Docker Compose client; scripts/test.sh installs Debian's docker-compose")
        pytest.skip("no Docker Compose client on this machine")
    r = subprocess.run([*cli, "-f", str(ROOT / "compose.yaml"), "config", "-q"], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr


def test_services_and_redis_persistence():
    data = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert {"redis", "scheduler", "workers", "flower"} <= set(data["services"])
    redis = data["services"]["redis"]
    assert "--appendonly" in redis["command"] and "yes" in redis["command"]
    assert redis["healthcheck"]["test"][-1] == "ping"
    for name in ("scheduler", "workers", "flower"):
        assert data["services"][name]["build"] == "."
    assert all(p.startswith("127.0.0.1:") for p in data["services"]["flower"]["ports"])


def _service_env(name: str) -> dict[str, str]:
    data = yaml.safe_load((ROOT / "compose.yaml").read_text())
    return dict(data["services"][name]["environment"])


def _in_repo(container_path: str) -> Path:
    """The repository file a container path of the scheduler service is mounted from."""
    data = yaml.safe_load((ROOT / "compose.yaml").read_text())
    for volume in data["services"]["scheduler"]["volumes"]:
        source, _, rest = volume.partition(":")
        target = rest.split(":")[0]
        if source.startswith("./") and container_path.startswith(target + "/"):
            return ROOT / source / container_path[len(target) + 1:]
    raise AssertionError(f"{container_path} is not mounted from the repository")


def test_out_of_the_box_config_is_the_embedded_default_on_the_local_backend():
    from crossdock.workers.liveconfig import validate

    env = _service_env("scheduler")
    path = _in_repo(env["CROSSDOCK_CONFIG"])
    assert path == ROOT / "crossdock" / "configs" / "local.yaml"
    checked = validate(path)  # what `up` in the container loads, with the dry cycle
    assert {p.backend for p in checked.config.pools.values()} == {"local"}
    data = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert data["services"]["scheduler"]["command"][0] == "up"  # the scheduler and the local worker together
    assert "profiles" in data["services"]["workers"]  # remote-backend workers only on request
    assert "crossdock.local" not in " ".join(data["services"]["workers"]["entrypoint"])
    for name in ("scheduler", "flower"):
        assert _service_env(name)["CROSSDOCK_CELERY_EVENTS"] == "1"


@pytest.mark.operate
@pytest.mark.redis
@pytest.mark.celery
def test_the_scheduler_service_runs_a_job_and_flower_sees_its_task_events(redis_url, tmp_path):
    """The scheduler service's command and environment (the compose Redis replaced by the test's):
    a job runs to COMPLETED and Celery's task events for its dispatch reach an event receiver, as
    they reach Flower."""
    import signal
    import sys
    import threading
    import time
    import uuid

    from crossdock.queue.states import TERMINAL, JobState
    from crossdock.workers.app import make_app

    data = yaml.safe_load((ROOT / "compose.yaml").read_text())
    env = {**os.environ, **_service_env("scheduler"), "CROSSDOCK_REDIS_URL": redis_url,
           "CROSSDOCK_CONFIG": str(_in_repo(_service_env("scheduler")["CROSSDOCK_CONFIG"])),
           "CROSSDOCK_STATE_DIR": str(tmp_path / "state"), "CROSSDOCK_PREFIX": f"c{uuid.uuid4().hex[:8]}"}
    seen: list[dict] = []
    app = make_app(redis_url)
    conn = app.connection()
    receiver = app.events.Receiver(conn, handlers={"*": seen.append})
    listening = threading.Thread(target=lambda: receiver.capture(limit=None, timeout=None, wakeup=False), daemon=True)
    listening.start()
    log = tmp_path / "up.log"
    with open(log, "ab") as out:
        up = subprocess.Popen([sys.executable, "-m", "crossdock", *data["services"]["scheduler"]["command"]],
                              env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        r = subprocess.run([sys.executable, "-m", "crossdock.cli.main", "submit", "--parsable", "--wrap", "true"],
                           env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert r.returncode == 0, r.stderr
        job_id = int(r.stdout.strip())
        from crossdock.backends.redis_store.store import JobStore

        store = JobStore.from_url(redis_url, env["CROSSDOCK_PREFIX"])
        deadline = time.monotonic() + 60
        while (job := store.get(job_id)).state not in TERMINAL:
            assert time.monotonic() < deadline and up.poll() is None, log.read_text()[-3000:]
            time.sleep(0.1)
        assert job.state is JobState.COMPLETED

        def dispatch_events() -> set[str]:
            ours = {e["uuid"] for e in seen if e.get("name") == "crossdock.dispatch" and
                    str(job_id) in str(e.get("args", ""))}
            return {e["type"] for e in seen if e.get("uuid") in ours}

        deadline = time.monotonic() + 20
        while not {"task-received", "task-started", "task-succeeded"} <= dispatch_events():
            assert time.monotonic() < deadline, f"task events seen: {dispatch_events()}"
            time.sleep(0.1)
        assert "task-sent" in dispatch_events()  # the scheduler's sender
    finally:
        receiver.should_stop = True
        up.send_signal(signal.SIGTERM)
        try:
            up.wait(120)  # Celery's warm shutdown, stretched on a loaded machine
        except subprocess.TimeoutExpired:
            up.kill()  # never left running after the test (its workers go with it)
            up.wait()
            raise AssertionError(f"up did not stop within 120 s of SIGTERM:\n{log.read_text()[-3000:]}") from None
        conn.release()
