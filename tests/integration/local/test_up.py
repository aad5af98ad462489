"""``crossdock up`` as an operator runs it (a subprocess on its own embedded Redis): it restarts
what dies, stops within seconds, leaves no worker behind, runs once per state directory, and
``crossdock health`` says how each part is doing."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from crossdock import service
from crossdock.backends.redis_store import embedded
from crossdock.queue.errors import StoreUnavailable
from crossdock.queue.models import JobSpec
from crossdock.queue.states import JobState
from crossdock.runtime import Runtime
from tests.conftest import TEST_CONFIG
from tests.waiting import eventually

pytestmark = [pytest.mark.redis, pytest.mark.celery]


def answering(rt) -> bool:
    """Whether the store answers (a restarted Redis refuses reads while it loads its AOF)."""
    try:
        rt.store.all_ids()
    except StoreUnavailable:
        return False
    return True


class Up:
    """One ``crossdock up`` process on the state directory ``state``."""

    def __init__(self, state: Path, env: dict[str, str], log: Path, cwd: Path | None = None):
        self.state, self.env, self.log = state, env, log
        with open(log, "ab") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "crossdock", "up"], env=env, stdout=out,
                                         stderr=subprocess.STDOUT, cwd=cwd)
        eventually("up to start its worker", lambda: self.worker_pid() or self.proc.poll() is not None, 60)
        assert self.proc.poll() is None, log.read_text()[-3000:]

    def worker_pid(self) -> int | None:
        try:
            data = json.loads((self.state / "up.pid").read_text())
        except (OSError, ValueError):
            return None
        return data["workers"][0] if data.get("pid") == self.proc.pid and data.get("workers") else None

    def reported_redis(self) -> int | None:
        """The embedded Redis pid this up last reported, once that Redis answers."""
        try:
            pid = json.loads((self.state / "up.json").read_text())["redis"]["pid"]
        except (OSError, ValueError, KeyError):
            return None
        return pid if pid and pid == embedded.pid(self.state) else None

    def stop(self, sig=signal.SIGTERM) -> float:
        started = time.monotonic()
        self.proc.send_signal(sig)
        self.proc.wait(30)
        return time.monotonic() - started


def workers_of(state: Path) -> list[int]:
    """Live Celery worker processes (main or pool child) bound to this state directory."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue
        if b"crossdock.workers.worker" in cmdline and f"CROSSDOCK_STATE_DIR={state}\0".encode() in environ:
            status = (entry / "status").read_text()
            if "State:\tZ" not in status:
                found.append(int(entry.name))
    return found


@pytest.fixture
def up_env(tmp_path):
    cfg = tmp_path / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump(TEST_CONFIG))
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSDOCK_")}
    env.update({"CROSSDOCK_STATE_DIR": str(state), "CROSSDOCK_CONFIG": str(cfg)})
    yield state, env
    for pid in workers_of(state):  # only if a test failed half-way
        os.kill(pid, signal.SIGKILL)
    embedded.stop(state, timeout=5)


def client_runtime(state: Path, env: dict[str, str], monkeypatch) -> Runtime:
    for k, v in env.items():
        if k.startswith("CROSSDOCK_"):
            monkeypatch.setenv(k, v)
    monkeypatch.delenv("CROSSDOCK_REDIS_URL", raising=False)
    monkeypatch.delenv("CROSSDOCK_PREFIX", raising=False)
    return Runtime.from_env(start_redis=False)  # the up started first: its Redis and its password file exist


def run_job(rt: Runtime, workdir: Path, timeout: float = 60) -> JobState:
    job, = service.submit(rt, [JobSpec(command=["sh", "-c", "exit 0"], workdir=str(workdir))])
    return eventually(f"job {job.id} to end", lambda: (s := rt.store.get(job.id).state).terminal and s, timeout)


def health(env) -> tuple[int, dict]:
    out = subprocess.run([sys.executable, "-m", "crossdock", "health", "--json"], env=env, capture_output=True,
                         text=True, timeout=60)
    return out.returncode, json.loads(out.stdout)


def parts(report) -> dict[str, bool]:
    return {p["name"].split()[0]: p["ok"] for p in report["parts"]}


def test_up_replaces_a_killed_worker_and_redis_reports_health_and_stops_on_sigterm(up_env, tmp_path, monkeypatch):
    state, env = up_env
    up = Up(state, env, tmp_path / "up.log")
    rt = client_runtime(state, env, monkeypatch)
    rc, report = eventually("healthy", lambda: (h := health(env))[0] == 0 and h, 30)
    assert report["status"] == "healthy" and all(parts(report).values())
    assert run_job(rt, tmp_path) is JobState.COMPLETED

    # a SIGKILLed worker is replaced, and jobs still run
    first = up.worker_pid()
    os.killpg(first, signal.SIGKILL)
    eventually("a new worker", lambda: up.worker_pid() not in (None, first))
    assert run_job(rt, tmp_path) is JobState.COMPLETED

    # a SIGKILLed embedded Redis is started again, with the jobs its append-only file kept
    before = rt.store.all_ids()
    redis_pid = embedded.pid(state)
    os.kill(redis_pid, signal.SIGKILL)
    eventually("Redis restarted", lambda: embedded.pid(state) not in (None, redis_pid))
    assert eventually("Redis answering", lambda: answering(rt)) and rt.store.all_ids() == before
    assert run_job(rt, tmp_path, timeout=90) is JobState.COMPLETED

    # a Redis that is alive but does not answer: degraded, and healthy again once it answers
    redis_pid = embedded.pid(state)
    os.kill(redis_pid, signal.SIGSTOP)
    try:
        rc, report = eventually("degraded", lambda: (h := health(env))[0] == 1 and h, 30)
        assert report["status"] == "degraded"
        assert parts(report)["redis"] is False and parts(report)["up"] is True
    finally:
        os.kill(redis_pid, signal.SIGCONT)
    eventually("healthy again", lambda: health(env)[0] == 0, 60)
    assert embedded.pid(state) == redis_pid  # a stopped process is not a dead one: not restarted

    # SIGTERM: stopped (Up.stop waits for it), no worker left, the embedded Redis stopped (nothing placed)
    took = up.stop(signal.SIGTERM)
    print(f"crossdock up stopped in {took:.2f}s after SIGTERM")
    assert up.proc.returncode == 0, (tmp_path / "up.log").read_text()[-3000:]
    assert workers_of(state) == []
    assert "embedded Redis stopped" in (tmp_path / "up.log").read_text()
    assert embedded.pid(state) is None
    rc, report = health(env)
    assert rc == 1 and report["status"] == "down"


def test_a_killed_up_leaves_no_worker_and_a_second_up_adds_none(up_env, tmp_path):
    state, env = up_env
    first = Up(state, env, tmp_path / "up1.log")
    worker = first.worker_pid()
    assert len(eventually("the pool", lambda: len(workers_of(state)) >= 3 and workers_of(state))) == 3

    second = subprocess.run([sys.executable, "-m", "crossdock", "up"], env=env, capture_output=True, text=True,
                            timeout=60)
    assert second.returncode == 1
    assert second.stderr.strip().splitlines() == [
        f"crossdock: error: crossdock up is already running (pid {first.proc.pid}) on the state directory {state};"
        " stop it first, or set CROSSDOCK_STATE_DIR to another directory"]
    assert worker in workers_of(state) and len(workers_of(state)) == 3  # main + 2 pool processes, still

    first.stop(signal.SIGKILL)
    started = time.monotonic()
    eventually("the orphaned worker to go by itself", lambda: not workers_of(state), 60)
    print(f"worker gone {time.monotonic() - started:.2f}s after SIGKILL of up")

    # an up started at once after a SIGKILL, before the orphan has gone by itself, stops it first
    killed = Up(state, env, tmp_path / "up2.log")
    orphan = eventually("the pool", lambda: len(workers_of(state)) >= 3 and workers_of(state))
    killed.stop(signal.SIGKILL)
    again = Up(state, env, tmp_path / "up3.log")
    try:
        mine = eventually("the pool", lambda: len(workers_of(state)) >= 3 and workers_of(state))
        assert len(mine) == 3 and not set(mine) & set(orphan) and again.worker_pid() in mine
    finally:
        again.stop()
    assert workers_of(state) == []


@pytest.mark.filterwarnings("ignore::pytest.PytestUnhandledThreadExceptionWarning")  # the death is the point
def test_a_dead_loop_thread_comes_back_and_one_that_keeps_dying_gives_up(runtime):
    from crossdock.workers.supervision import GaveUp, Restarts, Service

    svc = Service(runtime, workers=0)
    try:
        real_run = svc.scheduler.run
        svc.stop_event.set()  # the first thread ends, as a loop that died would
        svc.thread.join(5)
        svc.stop_event.clear()
        svc.restarts["scheduler"] = Restarts("the scheduler loop", limit=2)
        svc.scheduler.run = lambda stop, *a: sys.exit("a bug that escaped the loop")
        svc.check()  # restart 1: dies at once
        eventually("the restarted thread to die", lambda: not svc.thread.is_alive(), 5)
        svc.scheduler.run = real_run
        svc.check()  # restart 2: this one lives and runs cycles
        eventually("a cycle", lambda: svc.scheduler.parts["cycle"].last_success_at is not None, 10)
        svc.check()
        assert svc.thread.is_alive() and svc.restarts["scheduler"].total == 2
        svc.stop_event.set()
        svc.thread.join(5)
        svc.stop_event.clear()
        with pytest.raises(GaveUp, match="the scheduler loop died 3 times within 60s; giving up"):
            svc.check()
    finally:
        svc.stop()


def test_up_gives_up_with_one_line_and_status_1_when_redis_keeps_dying(up_env, tmp_path):
    state, env = up_env
    up = Up(state, env, tmp_path / "up.log")
    for _ in range(6):  # the sixth death within a minute is one too many
        pid = eventually("up to report Redis running", lambda: up.reported_redis() or (up.proc.poll() is not None and -1))
        if pid == -1:
            break
        os.kill(pid, signal.SIGKILL)
        eventually("Redis gone", lambda: embedded.pid(state) != pid)
    up.proc.wait(30)
    log = (tmp_path / "up.log").read_text()
    assert up.proc.returncode == 1, log[-3000:]
    errors = [line for line in log.splitlines() if line.startswith("crossdock: error:")]
    assert len(errors) == 1 and "the embedded Redis died 6 times within 60s; giving up" in errors[0], log[-3000:]
    assert "Traceback" not in log.split("stopping:")[-1]
    assert workers_of(state) == []


def test_a_job_running_when_up_stops_runs_to_its_end_and_keeps_redis(up_env, tmp_path, monkeypatch):
    state, env = up_env
    up = Up(state, env, tmp_path / "up.log")
    rt = client_runtime(state, env, monkeypatch)
    marker, release = tmp_path / "ran-to-the-end", tmp_path / "release"
    # the job runs until the test releases it, so it is still running however long up takes to stop
    script = f"while [ ! -e {release} ]; do sleep 0.1; done; touch {marker}"
    job, = service.submit(rt, [JobSpec(command=["sh", "-c", script], workdir=str(tmp_path))])
    eventually("the job running", lambda: rt.store.get(job.id).state is JobState.RUNNING)
    up.stop(signal.SIGTERM)  # it does not wait for the job, which runs until released
    assert up.proc.returncode == 0
    assert "embedded Redis kept running" in (tmp_path / "up.log").read_text()
    assert rt.store.get(job.id).state is JobState.RUNNING
    release.touch()
    done = eventually("the job's end", lambda: (j := rt.store.get(job.id)).state.terminal and j, 30)
    assert done.state is JobState.COMPLETED and done.exit_code == 0 and marker.exists()
    assert workers_of(state) == []
