"""Attacks on a multi-user site that end in code run as root, tried as an attacker would.

Root runs the service on a Redis the second user (``crossdock-t2``) can reach and write (TCP on
loopback, no password: the shared Redis of tests/integration/local/test_users.py):

- the second user's Python job returns an object whose unpickling runs a command: root reading
  that result must never unpickle it (its owner may, as itself);
- the second user rewrites a pending job of root's in Redis (another command, another
  environment, no seal, a seal of its own): none of it runs, the job fails with ``BadSeal`` and
  an event saying so;
- a job's environment is in no Redis key in clear;
- ``crossdock up`` as root refuses an external Redis that anyone could write unless told
  ``--insecure-shared-redis``, and then warns.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import redis
import yaml

from crossdock.queue.states import JobState
from tests.conftest import TEST_CONFIG, Cluster
from tests.integration.local.test_users import (  # noqa: F401 - fixtures
    issued_key, run_as_second, service_rt, shared_redis, users)
from tests.waiting import eventually as wait_until

pytestmark = [pytest.mark.security, pytest.mark.redis, pytest.mark.celery]


# --- a result is unpickled only by its owner ---------------------------------------------------

EVIL_RESULT = """
import os, sys
from crossdock import Client

MARKER = sys.argv[1]

class Evil:
    def __reduce__(self):  # unpickling it runs the command, as whoever unpickles it
        return (os.system, ("id -u > " + MARKER,))

def make():
    return Evil()

h = Client().submit(make, stdout="/dev/null")
print(h.id)
"""

READ_RESULT = "import sys\nfrom crossdock import Client\nprint(Client().job(int(sys.argv[1])).result(timeout=90))\n"


def test_root_reading_a_users_result_never_runs_its_pickle(users, service_rt, tmp_path, monkeypatch):
    from crossdock import Client
    from crossdock.handles import ForeignResult

    # the service on a Python the second user may run: its supervisors start the job's runner with it
    monkeypatch.setattr(sys, "executable", users["python"])
    monkeypatch.setenv("PYTHONPATH", users["env"]["PYTHONPATH"])
    marker = users["work"] / f"pwned-{uuid.uuid4().hex[:6]}"
    cluster = Cluster(service_rt, tmp_path)
    try:
        r = run_as_second(users, ["-c", EVIL_RESULT, str(marker)], issued_key(users))
        assert r.returncode == 0, r.stderr
        job_id = int(r.stdout)
        job = cluster.wait(job_id, timeout=90)
        assert job.state is JobState.COMPLETED, job.reason
        assert service_rt.store.result(job_id) is not None  # the planted pickle is there, sealed by the service

        handle = Client(service_rt).job(job_id)
        with pytest.raises(ForeignResult) as refused:
            handle.result(timeout=30)
        message = str(refused.value)
        assert "\n" not in message and f"job {job_id}" in message and "'crossdock-t2'" in message, message
        assert f"sudo -u crossdock-t2 python -c 'from crossdock import Client; print(Client().job({job_id})" \
               ".result())'" in message
        assert isinstance(Client(service_rt).job(job_id).exception(timeout=30), ForeignResult)
        assert not marker.exists()  # root unpickled nothing

        # Its owner reads it as itself: the command runs, as the owner.
        own = run_as_second(users, ["-c", READ_RESULT, str(job_id)], issued_key(users))
        assert own.returncode == 0 and own.stdout.strip() == "0", own
        assert marker.read_text().split() == [str(users["uid"])] and marker.stat().st_uid == users["uid"]
    finally:
        cluster.close()


# --- a spec changed in Redis never runs ----------------------------------------------------------

TAMPER = """
import json, sys
import redis
r = redis.Redis.from_url(sys.argv[1], decode_responses=True)
key, how, marker, job_id = sys.argv[2], sys.argv[3], sys.argv[4], int(sys.argv[5])
spec = json.loads(r.hget(key, "spec"))
spec.pop("hold", None)
if how == "command":
    spec["command"] = ["sh", "-c", "id -u > " + marker]
elif how == "env":
    spec["command"] = ["sh", "-c", "printenv LD_PRELOAD > " + marker]
    r.hdel(key, "env")
    spec["env"] = {"LD_PRELOAD": "/tmp/evil.so"}
elif how == "unsealed":
    spec["command"] = ["sh", "-c", "id -u > " + marker]
    r.hdel(key, "seal")
elif how == "own seal":
    spec["command"] = ["sh", "-c", "id -u > " + marker]
text = json.dumps(spec, separators=(",", ":"))
r.hset(key, mapping={"spec": text, "reason": "None"})
if how == "own seal":  # sealed with the second user's own (issued) key, the spec still naming root
    from crossdock.backends.redis_store.sealing import _mac
    own = open(sys.argv[6], "rb").read()
    r.hset(key, "seal", _mac(own, job_id, text, r.hget(key, "env") or ""))
print("ok")
"""


def test_a_spec_rewritten_in_redis_never_runs_and_fails_with_an_event(users, service_rt, tmp_path):
    from crossdock import service
    from crossdock.queue.models import JobSpec

    rt = service_rt
    marker_of = {how: users["work"] / f"ran-{how.replace(' ', '-')}" for how in ("command", "env", "unsealed", "own seal")}
    jobs = {how: service.submit(rt, [JobSpec(command=["true"], stdout="/dev/null", hold=True,
                                             env={"MY_TOKEN": "t"})])[0]
            for how in marker_of}
    t2_key = issued_key(users)["CROSSDOCK_SIGNING_KEY"]
    for how, job in jobs.items():
        r = run_as_second(users, ["-c", TAMPER, users["env"]["CROSSDOCK_REDIS_URL"], rt.store.k.job(job.id), how,
                                  str(marker_of[how]), str(job.id), t2_key])
        assert r.stdout.strip() == "ok", r  # the second user did rewrite root's job
    cluster = Cluster(rt, tmp_path)
    try:
        for how, job in jobs.items():
            done = cluster.wait(job.id, timeout=90)
            assert done.state is JobState.FAILED and done.reason.startswith("BadSeal: the spec of job"), (how, done)
            events = [e for e in rt.store.events(job.id) if e.get("to") == "FAILED"]
            assert len(events) == 1 and events[0]["reason"] == done.reason, (how, events)
        # a genuine job of root's still runs: the flow itself is intact
        [good] = service.submit(rt, [JobSpec(command=["sh", "-c", f"id -u > {users['work']}/good"],
                                             stdout="/dev/null")])
        assert cluster.wait(good.id, timeout=90).state is JobState.COMPLETED
    finally:
        cluster.close()
    for how, marker in marker_of.items():
        assert not marker.exists(), how  # nothing of any rewritten spec ran
    assert (users["work"] / "good").read_text().split() == ["0"]


def test_the_local_supervisor_refuses_a_spec_rewritten_after_dispatch(users, service_rt):
    """The window between the dispatch task's check and the supervisor's start: checked again."""
    from crossdock import service
    from crossdock.backends.local.supervisor import Supervisor, store_from_env
    from crossdock.queue.models import JobSpec

    rt = service_rt
    marker = users["work"] / "ran-after-dispatch"
    [job] = service.submit(rt, [JobSpec(command=["true"], stdout="/dev/null")])
    assert rt.store.transition(job.id, JobState.SCHEDULED, bump_attempt=True)  # as the leader does
    r = run_as_second(users, ["-c", TAMPER, users["env"]["CROSSDOCK_REDIS_URL"], rt.store.k.job(job.id), "command",
                              str(marker), str(job.id)])
    assert r.stdout.strip() == "ok", r
    assert Supervisor(store_from_env(), rt.settings.state_dir, 1.0).run(job.id, 1) == 0
    done = rt.store.get(job.id)
    assert done.state is JobState.FAILED and done.reason.startswith("BadSeal: the spec of job"), done
    assert not marker.exists()


# --- no environment in clear in Redis ------------------------------------------------------------

def every_value(r: redis.Redis) -> bytes:
    """Every byte Redis holds, read key by key by type (DUMP compresses long strings)."""
    out = []
    for key in r.scan_iter(count=1000):
        kind = r.type(key).decode()
        out.append(key)
        if kind == "string":
            out.append(r.get(key) or b"")
        elif kind == "hash":
            out += [b for kv in r.hgetall(key).items() for b in kv]
        elif kind == "list":
            out += r.lrange(key, 0, -1)
        elif kind == "set":
            out += list(r.smembers(key))
        elif kind == "zset":
            out += [m for m, _s in r.zrange(key, 0, -1, withscores=True)]
        elif kind == "stream":
            out += [b for _id, fields in r.xrange(key) for kv in fields.items() for b in kv]
        else:
            raise AssertionError(f"key {key!r} of type {kind}: read it too")
    return b"\0".join(out)


def test_a_jobs_environment_is_in_no_redis_key_in_clear(users, service_rt, tmp_path):
    from crossdock import service
    from crossdock.queue.models import JobSpec

    rt = service_rt
    token = f"s3cr3t-{uuid.uuid4().hex}"
    out = tmp_path / "token.out"
    cluster = Cluster(rt, tmp_path)
    try:
        [job] = service.submit(rt, [JobSpec(command=["sh", "-c", f"env > {out}"],
                                            stdout="/dev/null", env={"MY_TOKEN": token})])
        assert cluster.wait(job.id, timeout=90).state is JobState.COMPLETED
        [pending] = service.submit(rt, [JobSpec(command=["true"], hold=True, env={"MY_TOKEN": token})])
    finally:
        cluster.close()
    assert f"MY_TOKEN={token}" in out.read_text().splitlines()  # the job got it
    assert rt.store.get(pending.id).spec.env == {"MY_TOKEN": token}  # the service reads it
    held = every_value(redis.Redis.from_url(users["env"]["CROSSDOCK_REDIS_URL"]))
    assert rt.store.k.job(pending.id).encode() in held
    assert token.encode() not in held and b"MY_TOKEN" not in held
    # The second user, reading the same Redis through crossdock, sees no environment of root's.
    code = ("import sys\nfrom crossdock import Client\nc = Client()\n"
            "print(repr(c.runtime.store.get(int(sys.argv[1])).spec.env))\n")
    r = run_as_second(users, ["-c", code, str(pending.id)], issued_key(users))
    assert r.returncode == 0 and r.stdout.strip() == "{}", r


# --- up as root refuses a Redis anyone can write -------------------------------------------------

def redis_server(tmp_path: Path, *args: str) -> tuple[subprocess.Popen, Path]:
    data = tmp_path / f"redis-{uuid.uuid4().hex[:6]}"
    data.mkdir()
    proc = subprocess.Popen(["redis-server", "--dir", str(data), "--save", "", "--appendonly", "no", *args],
                            stdout=subprocess.DEVNULL)
    return proc, data


def up(tmp_path: Path, url: str, *flags: str) -> subprocess.Popen:
    cfg = tmp_path / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump(TEST_CONFIG))
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSDOCK_")}
    env.update({"CROSSDOCK_STATE_DIR": str(tmp_path / f"state-{uuid.uuid4().hex[:6]}"), "CROSSDOCK_CONFIG": str(cfg),
                "CROSSDOCK_REDIS_URL": url, "CROSSDOCK_PREFIX": f"up{uuid.uuid4().hex[:8]}"})
    return subprocess.Popen([sys.executable, "-m", "crossdock", "up", "--workers", "0", *flags], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)


def refused(proc: subprocess.Popen) -> str:
    """The one line of an ``up`` that refused to start (one that started is stopped, and fails)."""
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        raise AssertionError(f"up started on a Redis anyone can write: {out} {err}") from None
    assert proc.returncode == 1 and "crossdock up:" not in out, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in err and "--insecure-shared-redis" in lines[0], err
    return lines[0]


def starts(proc: subprocess.Popen) -> str:
    """The stderr of an ``up`` that started (its first stdout line says so), stopped again."""
    try:
        line = proc.stdout.readline()
        assert line.startswith("crossdock up: redis"), (line, proc.stderr.read() if proc.poll() is not None else "")
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    return err


def test_up_as_root_refuses_a_redis_anyone_can_write_unless_told(tmp_path, shared_redis):
    assert os.geteuid() == 0
    # TCP, no password: anyone on the machine writes it
    line = refused(up(tmp_path, shared_redis))
    assert "answers a client that gives no password" in line, line
    warned = starts(up(tmp_path, shared_redis, "--insecure-shared-redis"))
    assert "crossdock: warning: --insecure-shared-redis" in warned and "no password" in warned, warned

    # A password, but on a socket every user may write; and the same Redis on a private socket
    password = uuid.uuid4().hex
    sock_dir = tmp_path / "sock"
    sock_dir.mkdir(mode=0o755)
    open_sock, private_sock = sock_dir / "open.sock", tmp_path / "private.sock"
    procs = [redis_server(tmp_path, "--port", "0", "--unixsocket", str(open_sock), "--unixsocketperm", "777",
                          "--requirepass", password)[0],
             redis_server(tmp_path, "--port", "0", "--unixsocket", str(private_sock), "--unixsocketperm", "700",
                          "--requirepass", password)[0]]
    try:
        for sock in (open_sock, private_sock):
            wait_until(f"redis on {sock}", lambda s=sock: _answers(f"unix://:{password}@{s}"), 30)
        line = refused(up(tmp_path, f"unix://:{password}@{open_sock}"))
        assert f"its socket {open_sock} is writable by every user" in line and password not in line, line
        assert "warning" not in starts(up(tmp_path, f"unix://:{password}@{private_sock}"))
    finally:
        for p in procs:
            p.terminate()
            p.wait(10)


def _answers(url: str) -> bool:
    try:
        return bool(redis.Redis.from_url(url).ping())
    except redis.RedisError:
        return False
