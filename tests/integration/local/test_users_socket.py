"""Two Unix users against one multi-user service: ``crossdock up --multi-user`` (root, on its
embedded Redis with its password) serves a Unix socket; root and a second user (``crossdock-t2``)
reach it only through that socket, with the CLI and the Python API.

The service knows each caller from the kernel (SO_PEERCRED): every cross-user mutation is
refused, a caller that claims to be another user is refused, and Redis does not answer anyone
without the password that only the service can read.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
import redis
import yaml

from crossdock.backends.redis_store import embedded
from crossdock.queue.states import JobState
from tests.conftest import TEST_CONFIG
from tests.integration.local.test_users import SECOND, interpreter, second_user
from tests.waiting import eventually

pytestmark = [pytest.mark.redis, pytest.mark.celery]


def answers(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(str(path))
            return True
        except OSError:
            return False


@pytest.fixture
def service(monkeypatch, request):
    """``up --multi-user`` as root in a directory the second user may enter; the environments of
    both users' clients (the socket, no Redis URL, a LOGNAME that lies). Indirect parameters:
    config keys to add to the test config."""
    t2 = second_user()
    home = Path(f"/tmp/crossdock-ms-{uuid.uuid4().hex[:8]}")
    home.mkdir(mode=0o755)
    home.chmod(0o755)
    cfg = home / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump({**TEST_CONFIG, "admins": [], **getattr(request, "param", {})}))
    cfg.chmod(0o644)
    work = home / "work"
    work.mkdir()
    os.chown(work, t2.pw_uid, t2.pw_gid)
    state, sock = home / "state", home / "run" / "crossdock.sock"
    # The service runs on a Python both users may run, as an installed one is: its local
    # supervisors start a Python job's runner with it, as the job's owner.
    python, pythonpath = interpreter(t2.pw_uid, home)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSDOCK_")}
    env.update({"CROSSDOCK_STATE_DIR": str(state), "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_SOCKET": str(sock),
                "PYTHONPATH": pythonpath})
    log = home / "up.log"
    with open(log, "ab") as out:
        up = subprocess.Popen([python, "-m", "crossdock", "up", "--multi-user", "--workers", "2"], env=env,
                              stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        eventually("the service's socket", lambda: answers(sock) or up.poll() is not None)
        assert up.poll() is None, log.read_text()[-3000:]
        for k in [k for k in os.environ if k.startswith("CROSSDOCK_")]:
            monkeypatch.delenv(k)
        monkeypatch.setenv("CROSSDOCK_SOCKET", str(sock))  # this test's own clients: root through the socket
        monkeypatch.setenv("CROSSDOCK_STATE_DIR", str(home / "root-client"))  # not the service's
        second = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": pythonpath,
                  "CROSSDOCK_SOCKET": str(sock), "CROSSDOCK_STATE_DIR": str(home / "t2-state"),
                  "LOGNAME": "root", "USER": "root"}  # lies: not trusted
        yield {"uid": t2.pw_uid, "gid": t2.pw_gid, "env": second, "python": python, "work": work, "state": state,
               "sock": sock, "log": log, "home": home, "up_env": env, "pid": up.pid, "config": cfg}
    finally:
        os.killpg(up.pid, signal.SIGTERM)
        try:
            up.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait()
        embedded.stop(state, timeout=5)
        shutil.rmtree(home, ignore_errors=True)


def as_second(svc, argv, extra=None, cwd=None):
    return subprocess.run([svc["python"], *argv], user=svc["uid"], group=svc["gid"], extra_groups=[],
                          env={**svc["env"], **(extra or {})}, cwd=cwd or svc["work"], capture_output=True,
                          text=True, timeout=120)


def cli_as_second(svc, *args):
    return as_second(svc, ["-m", "crossdock.cli.main", *args])


def root_client():
    from crossdock import Client

    return Client()


def test_every_cross_user_mutation_is_refused_through_the_socket(service):
    client = root_client()
    assert client.gateway.remote and client.user == "root"
    held = client.submit_command(["true"], hold=True, stdout="/dev/null")
    for action in ("cancel", "hold", "release", "requeue"):
        r = cli_as_second(service, action, str(held.id))
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, (action, r)
        assert f"job {held.id}" in lines[0] and "'root'" in lines[0] and SECOND in lines[0], lines
        assert "Traceback" not in r.stderr + r.stdout
    code = ("from crossdock import Client\nfrom crossdock.client import JobHandle\n"
            "c = Client()\nassert c.gateway.remote\nh = JobHandle(c, c.gateway.job(%d))\n"
            "for act in (h.cancel, h.hold, h.release, h.requeue, h.result):\n"
            "    try:\n        act()\n    except Exception as e:\n        print(type(e).__name__, e)\n" % held.id)
    r = as_second(service, ["-c", code])
    lines = r.stdout.splitlines()
    assert len(lines) == 5 and all(ln.startswith("PermissionDenied") and f"job {held.id}" in ln for ln in lines), r
    events = client.gateway.events(held.id)
    refused = [(e["actor"], e["action"]) for e in events if e.get("event") == "refused"]
    assert refused == [(SECOND, a) for a in ("cancel", "hold", "release", "requeue", "cancel", "hold", "release",
                                             "requeue", "read the result of")]
    job = held.job
    assert job.state is JobState.PENDING and job.spec.hold
    # The second user sees root's job in the queue, without its environment.
    r = cli_as_second(service, "queue", "--json")
    assert r.returncode == 0 and [row["id"] for row in json.loads(r.stdout)] == [held.id], r
    assert job.spec.env  # root sees its own
    r = as_second(service, ["-c", "from crossdock import Client\nprint(Client().gateway.job(%d).spec.env)" % held.id])
    assert r.stdout.strip() == "{}", r
    # why it pends: its owner's to ask (its options show its request), through the socket too
    r = cli_as_second(service, "why", str(held.id))
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and f"why job {held.id}" in r.stderr, r
    assert client.gateway.why(held.id)["reason"].startswith("JobHeldUser")


def test_identity_comes_from_the_kernel_not_from_the_request(service):
    r = cli_as_second(service, "submit", "--parsable", "-H", "--wrap", "true")
    assert r.returncode == 0, r.stderr
    mine = int(r.stdout)
    client = root_client()
    assert client.gateway.job(mine).spec.user == SECOND  # LOGNAME=root changed nothing
    [theirs] = client.submit_specs([_spec(hold=True)])
    # The API's user=, a spec naming root, and a raw request claiming root: all refused.
    code = ("import json, socket, os\nfrom crossdock import Client\nfrom crossdock.queue.models import JobSpec\n"
            "try:\n    Client(user='root')\nexcept Exception as e:\n    print(type(e).__name__, e)\n"
            "try:\n    Client().submit_specs([JobSpec(user='root', command=['true'])])\n"
            "except Exception as e:\n    print(type(e).__name__, e)\n"
            "s = socket.socket(socket.AF_UNIX); s.connect(os.environ['CROSSDOCK_SOCKET'])\n"
            "s.sendall(json.dumps({'op': 'cancel', 'args': {'refs': ['%d']}, 'as': 'root'}).encode() + b'\\n')\n"
            "print(s.makefile().readline())\n" % theirs.id)
    r = as_second(service, ["-c", code])
    lines = [ln for ln in r.stdout.splitlines() if ln]
    assert len(lines) == 3, r
    assert lines[0].startswith("PermissionDenied user='root': you are 'crossdock-t2'"), lines
    assert lines[1].startswith("PermissionDenied user: 'root' is not you ('crossdock-t2')"), lines
    answer = json.loads(lines[2])
    assert answer["error"]["type"] == "PermissionDenied" and "you are 'crossdock-t2'" in answer["error"]["message"]
    assert theirs.state is JobState.PENDING
    own = cli_as_second(service, "release", str(mine))  # its own job: allowed
    assert own.returncode == 0, own.stderr
    assert client.gateway.job(mine).spec.hold is False


def test_redis_answers_no_one_without_the_services_password(service):
    state = service["state"]
    sock = embedded.socket_path(state)
    secret = embedded.password_path(state)
    assert secret.stat().st_mode & 0o777 == 0o600 and secret.stat().st_uid == 0
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(unix_socket_path=str(sock)).ping()  # root itself, without the password
    with pytest.raises(redis.AuthenticationError):
        redis.Redis(unix_socket_path=str(sock), password="guess").ping()
    assert redis.Redis.from_url(embedded.url_for(state)).ping()
    assert secret.read_text().strip() not in Path(f"/proc/{embedded.pid(state)}/cmdline").read_text()
    code = ("import redis, sys\n"
            "for how, kw in (('socket', {}), ('password file', None)):\n"
            "    try:\n"
            "        if kw is None:\n            open(sys.argv[2]).read()\n"
            "        else:\n            redis.Redis(unix_socket_path=sys.argv[1]).ping()\n"
            "        print(how, 'reached')\n"
            "    except Exception as e:\n        print(how, 'Permission denied' in str(e))\n")
    r = as_second(service, ["-c", code, str(sock), str(secret)])
    assert r.stdout.splitlines() == ["socket True", "password file True"], r
    # Nor does a client of the service need it: the second user's whole session goes through the socket.
    assert "CROSSDOCK_REDIS_URL" not in service["env"]
    # The service's own health names the socket among its parts, and never prints the password.
    health = subprocess.run([service["python"], "-m", "crossdock", "health", "--json"], env=service["up_env"],
                            capture_output=True, text=True, timeout=60)
    parts = {p["name"]: p for p in json.loads(health.stdout)["parts"]}
    assert parts["socket"]["ok"] and str(service["sock"]) in parts["socket"]["detail"], parts
    assert secret.read_text().strip() not in health.stdout + service["log"].read_text()


def test_the_second_users_jobs_run_as_it_through_the_socket(service):
    r = cli_as_second(service, "submit", "--parsable", "-o", "out-%j.txt", "--wrap", "id -u")
    assert r.returncode == 0, r.stderr
    job_id = int(r.stdout)
    waited = cli_as_second(service, "wait", "--quiet", "--timeout", "90", str(job_id))
    assert waited.returncode == 0, (waited, service["log"].read_text()[-2000:])
    out = service["work"] / f"out-{job_id}.txt"
    assert out.read_text().split() == [str(service["uid"])] and out.stat().st_uid == service["uid"]
    logs, info = cli_as_second(service, "logs", str(job_id)), cli_as_second(service, "info", "--json")
    assert logs.returncode == 0 and logs.stdout.split() == [str(service["uid"])], logs
    assert info.returncode == 0 and [row["node"] for row in json.loads(info.stdout)] == ["localhost"], info
    # A Python job: its payload sealed by the service for the authenticated caller, its result
    # unsealed by the service for its owner alone.
    code = ("from crossdock import Client\nc = Client()\nh = c.submit(pow, 2, 10, stdout='/dev/null')\n"
            "print(h.result(timeout=90))\n")
    r = as_second(service, ["-c", code])
    assert r.returncode == 0 and r.stdout.strip() == "1024", r
    client = root_client()
    assert client.gateway.job(job_id).state is JobState.COMPLETED  # root (an admin) reads anyone's


def _spec(**fields):
    from crossdock.queue.models import JobSpec

    fields.setdefault("command", ["true"])
    fields.setdefault("stdout", "/dev/null")
    return JobSpec(**fields)


def test_slurm_listings_and_filtered_cancel_through_the_socket(service):
    """queue -t all (paged), --start, priority, history and cancel -t reach the service's new reads
    through the socket; a filtered cancel keeps to the second user's own jobs."""
    held = root_client().submit_command(["true"], hold=True, stdout="/dev/null", name="shared")
    r = cli_as_second(service, "submit", "--parsable", "-H", "-J", "shared", "--wrap", "true")
    assert r.returncode == 0, r.stderr
    mine = int(r.stdout)
    r = cli_as_second(service, "queue", "-t", "all", "-h", "-o", "%i %t %u")
    assert r.returncode == 0 and r.stdout.splitlines() == [f"{held.id} PD root", f"{mine} PD {SECOND}"], r
    for args in (["queue", "--start"], ["priority"], ["history", "-a"]):
        r = cli_as_second(service, *args)
        assert r.returncode == 0 and str(mine) in r.stdout, (args, r)
    r = cli_as_second(service, "cancel", "-v", "-n", "shared", "-t", "PD")
    assert r.returncode == 0 and r.stdout.splitlines() == [f"{mine}: CANCELLED"], r
    assert held.job.state is JobState.PENDING
