"""Two Unix users against one service: root (the service, and the first user) and a system user
(``crossdock-t2``) running the CLI and the Python API as itself against the same Redis and prefix.

Every cross-user mutation is refused (exit 2, one line, a ``refused`` event), a payload or result
not sealed with its owner's key is never unpickled, and the second user's job runs as that user,
with the environment it exported and none of crossdock's secrets.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml

from crossdock.dev.proc import free_port
from crossdock.queue.states import JobState
from tests.conftest import TEST_CONFIG, Cluster

pytestmark = pytest.mark.redis
ROOT = Path(__file__).resolve().parents[3]
SECOND = "crossdock-t2"


def second_user() -> pwd.struct_passwd:
    """The system user ``crossdock-t2``, made on first use. Tests on other xdist workers may make it
    at the same moment: useradd then fails on /etc/passwd's lock, and a look again finds it."""
    deadline = time.monotonic() + 30
    while True:
        try:
            return pwd.getpwnam(SECOND)
        except KeyError:
            if time.monotonic() > deadline:
                raise
        subprocess.run(["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", SECOND],
                       check=False, capture_output=True)
        time.sleep(0.1)


@pytest.fixture
def shared_redis(tmp_path):
    """A Redis both users reach (TCP on loopback): the embedded one is the service's alone."""
    port = free_port()
    data = tmp_path / "redis"
    data.mkdir()
    proc = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--dir", str(data),
                             "--save", "", "--appendonly", "no"], stdout=subprocess.DEVNULL)
    url = f"redis://127.0.0.1:{port}/0"
    import redis

    deadline = time.monotonic() + 10
    while True:
        try:
            redis.Redis.from_url(url).ping()
            break
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
    yield url
    proc.terminate()
    proc.wait(10)


@pytest.fixture
def users(tmp_path, shared_redis, monkeypatch):
    """The service's environment (root) and the second user's: its own HOME, state and workdir."""
    t2 = second_user()
    home = Path(f"/tmp/crossdock-t2-{uuid.uuid4().hex[:8]}")
    home.mkdir(mode=0o755)
    cfg = home / "crossdock.yaml"  # readable by both
    cfg.write_text(yaml.safe_dump({**TEST_CONFIG, "admins": []}))
    cfg.chmod(0o644)
    work = home / "work"
    work.mkdir()
    os.chown(work, t2.pw_uid, t2.pw_gid)
    prefix = f"u{uuid.uuid4().hex[:10]}"
    service = {"CROSSDOCK_REDIS_URL": shared_redis, "CROSSDOCK_STATE_DIR": str(tmp_path / "state"),
               "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_PREFIX": prefix}
    for k, v in service.items():
        monkeypatch.setenv(k, v)
    monkeypatch.chdir(tmp_path)  # the Python API's jobs write slurm-<id>.out in the caller's directory
    state2 = home / "state"
    state2.mkdir()
    os.chown(state2, t2.pw_uid, t2.pw_gid)
    python, pythonpath = interpreter(t2.pw_uid, home)
    second = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(home), "PYTHONPATH": pythonpath,
              "CROSSDOCK_REDIS_URL": shared_redis, "CROSSDOCK_PREFIX": prefix, "CROSSDOCK_CONFIG": str(cfg),
              "CROSSDOCK_STATE_DIR": str(state2), "LOGNAME": "root", "USER": "root"}  # lies: not trusted
    yield {"uid": t2.pw_uid, "env": second, "work": work, "service": service, "python": python}
    shutil.rmtree(home, ignore_errors=True)


def interpreter(uid: int, home: Path) -> tuple[str, str]:
    """A Python the second user may run, and the PYTHONPATH it needs, the first that imports
    crossdock as that user: this one; the system's Python of the same minor version over this
    one's site-packages (an interpreter under root's 0700 home, as on the dev VM), with asyncio's
    own timeout standing in for ``async_timeout``, which redis-py needs before 3.11.3; or, when
    the checkout itself is closed to others, that Python over copies in ``home``."""
    import site

    system = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    shim = home / "shim"
    shim.mkdir()
    (shim / "async_timeout.py").write_text("from asyncio import timeout  # noqa: F401\n")

    def copies() -> tuple[str, str]:
        code = home / "code"
        shutil.copytree(ROOT / "crossdock", code / "crossdock", ignore=shutil.ignore_patterns("__pycache__"))
        sites = []
        for i, d in enumerate(site.getsitepackages()):
            shutil.copytree(d, home / f"site{i}", symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
            sites.append(str(home / f"site{i}"))
        for path in home.rglob("*"):
            os.chown(path, uid, -1, follow_symlinks=False)
        return system, os.pathsep.join([str(code), *sites, str(shim)])

    candidates = [lambda: (sys.executable, str(ROOT)),
                  lambda: (system, os.pathsep.join([str(ROOT), *site.getsitepackages(), str(shim)])), copies]
    for make in candidates:
        python, path = make()
        try:
            if subprocess.run([python, "-c", "import crossdock.cli.main, redis"], user=uid, capture_output=True,
                              env={"PYTHONPATH": path}, cwd="/").returncode == 0:
                return python, path
        except PermissionError:
            pass
    raise AssertionError("no Python the second user can run crossdock with")


def run_as_second(users, argv, extra=None):
    return subprocess.run([users["python"], *argv], user=users["uid"], group=pwd.getpwuid(users["uid"]).pw_gid,
                          extra_groups=[], env={**users["env"], **(extra or {})}, cwd=users["work"],
                          capture_output=True, text=True, timeout=60)


def as_second(users, *args, extra=None):
    return run_as_second(users, ["-m", "crossdock.cli.main", *args], extra)


@pytest.fixture
def service_rt(users):
    from crossdock.runtime import Runtime

    return Runtime.from_env()


def test_every_cross_user_mutation_is_refused_with_one_line_and_an_event(users, service_rt):
    from crossdock import service

    rt = service_rt
    [job] = service.submit(rt, [_spec(hold=True)])
    raw_spec = rt.store.r.hget(rt.store.k.job(job.id), "spec")
    for action in ("cancel", "hold", "release", "requeue"):
        r = as_second(users, action, str(job.id))
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1, (action, r)
        assert f"job {job.id}" in lines[0] and "'root'" in lines[0] and SECOND in lines[0], lines
        assert "Traceback" not in r.stderr + r.stdout
    refused = [(e["actor"], e["action"]) for e in rt.store.events(job.id) if e.get("event") == "refused"]
    assert refused == [(SECOND, "cancel"), (SECOND, "hold"), (SECOND, "release"), (SECOND, "requeue")]
    after = rt.store.get(job.id)
    assert after.state is JobState.PENDING and after.spec.hold
    assert rt.store.r.hget(rt.store.k.job(job.id), "spec") == raw_spec  # untouched, byte for byte


def test_the_python_api_refuses_the_same_with_a_typed_error(users, service_rt):
    from crossdock import service

    [job] = service.submit(service_rt, [_spec(hold=True)])
    code = ("from crossdock import Client\nfrom crossdock.client import JobHandle\n"
            "c = Client()\nh = JobHandle(c, c.runtime.store.get(%d))\n"
            "for act in (h.cancel, h.hold, h.release, h.requeue, h.result):\n"
            "    try:\n        act()\n    except Exception as e:\n        print(type(e).__name__, e)\n" % job.id)
    r = run_as_second(users, ["-c", code])
    lines = r.stdout.splitlines()
    assert len(lines) == 5 and all(line.startswith("PermissionDenied") and f"job {job.id}" in line for line in lines), r
    assert service_rt.store.get(job.id).state is JobState.PENDING


def test_identity_is_the_uid_not_what_the_caller_declares(users, service_rt):
    """The second user's LOGNAME/USER say root; its jobs are its own, and user= is refused."""
    r = as_second(users, "submit", "--parsable", "-H", "--wrap", "true")
    assert r.returncode == 0, r.stderr
    job = service_rt.store.get(int(r.stdout))
    assert job.spec.user == SECOND
    code = ("from crossdock import Client\n"
            "try:\n    Client(user='root')\nexcept Exception as e:\n    print(type(e).__name__, e)\n")
    r = run_as_second(users, ["-c", code])
    assert r.stdout.startswith("PermissionDenied user='root'"), r
    own = as_second(users, "release", str(job.id))  # its own job: allowed
    assert own.returncode == 0, own.stderr


def test_a_result_not_sealed_by_the_service_is_never_unpickled(users, service_rt, tmp_path):
    import cloudpickle

    from crossdock import Client, JobHandle, signing
    from crossdock.queue.errors import BadSignature

    rt = service_rt
    cluster = Cluster(rt, tmp_path)
    try:
        client = Client(rt)
        handle = client.submit(pow, 2, 10)
        assert handle.result(timeout=60) == 1024  # sealed by the supervisor, checked by the client
        marker = tmp_path / "pwned"
        evil = cloudpickle.dumps(_Exploit(str(marker)))
        forged = {
            "unsigned": evil,
            "another user's key": signing.seal(signing.derive(signing.master_key(rt.settings.state_dir), SECOND),
                                               f"result:{handle.id}", evil),
            "another job's seal": signing.seal(signing.user_key(rt.settings.state_dir, "root"),
                                               f"result:{handle.id + 1}", evil),
        }
        for how, blob in forged.items():
            rt.store.set_result(handle.id, blob)
            with pytest.raises(BadSignature, match=f"job {handle.id}"):
                JobHandle(client, handle.job).result()  # a fresh handle: a resolved one keeps its result
            assert not marker.exists(), how
    finally:
        cluster.close()


def test_a_payload_not_signed_by_its_owner_fails_without_running(users, service_rt, tmp_path):
    from crossdock import service
    from crossdock.pycall import encode_call
    from crossdock.queue.models import PythonCall

    rt = service_rt
    marker = tmp_path / "ran"
    payload = encode_call(Path.touch, (marker,))
    cluster = Cluster(rt, tmp_path)
    try:
        [job] = service.submit(rt, [_spec(python=PythonCall(payload=payload, signature="00" * 32))])
        done = cluster.wait(job.id)
        assert done.state is JobState.FAILED and "signature" in done.reason, done.reason
        assert not marker.exists()
    finally:
        cluster.close()


def issued_key(users) -> dict[str, str]:
    """The second user's environment for a key the service issued it (``crossdock issue-key``):
    what seals its specs and payloads so that the service runs them."""
    key_file = Path(users["env"]["HOME"]) / "t2.key"
    if not key_file.exists():
        r = subprocess.run([sys.executable, "-m", "crossdock.cli.main", "issue-key", SECOND, "-o", str(key_file)],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
    return {"CROSSDOCK_SIGNING_KEY": str(key_file)}


def test_the_second_users_job_runs_as_that_user_with_its_environment_only(users, service_rt, tmp_path):
    rt = service_rt
    cluster = Cluster(rt, tmp_path)
    try:
        r = as_second(users, "submit", "--parsable", "-o", "out-%j.txt", "--wrap", "id -u; env",
                      extra={"T2_MARKER": "from-t2", "CROSSDOCK_REDIS_URL": users["env"]["CROSSDOCK_REDIS_URL"],
                             "REDIS_PASSWORD": "hunter2", "SLURM_JWT": "jwt", **issued_key(users)})
        assert r.returncode == 0, r.stderr
        job_id = int(r.stdout)
        stored = rt.store.get(job_id).spec.env
        assert stored["T2_MARKER"] == "from-t2"
        assert not {"CROSSDOCK_REDIS_URL", "REDIS_PASSWORD", "SLURM_JWT"} & set(stored)
        job = cluster.wait(job_id)
        assert job.state is JobState.COMPLETED, job.reason
        out = users["work"] / f"out-{job_id}.txt"
        lines = out.read_text().splitlines()
        assert lines[0] == str(users["uid"])
        env = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
        assert env["T2_MARKER"] == "from-t2" and "CROSSDOCK_REDIS_URL" not in env and "REDIS_PASSWORD" not in env
        assert out.stat().st_uid == users["uid"]
        assert root_cancels_anyone(rt, users)
    finally:
        cluster.close()


def root_cancels_anyone(rt, users) -> bool:
    """An admin (root) may act on the second user's jobs."""
    from crossdock import service

    r = as_second(users, "submit", "--parsable", "-H", "--wrap", "true")
    job_id = int(r.stdout)
    return service.cancel(rt, [str(job_id)], lambda *a: None) == [(str(job_id), "CANCELLED")]


def test_state_files_are_the_services_alone(users, service_rt, tmp_path):
    from crossdock import Client

    rt = service_rt
    cluster = Cluster(rt, tmp_path)
    try:
        handle = Client(rt).submit(pow, 3, 2)
        assert handle.result(timeout=60) == 9
    finally:
        cluster.close()
    state = rt.settings.state_dir
    workspace = state / "jobs" / str(handle.id) / "1"
    for d in (state, state / "jobs", workspace, state / "log"):
        assert d.stat().st_mode & 0o777 == 0o700, d
    for f in (state / "hmac.key", workspace / "payload.b64", workspace / "result.pkl",
              state / "log" / f"supervisor-{handle.id}.log"):
        assert f.stat().st_mode & 0o777 == 0o600, f


class _Exploit:
    """Unpickling this creates a file: what a planted result would do."""

    def __init__(self, path: str):
        self.path = path

    def __reduce__(self):
        return (Path.touch, (Path(self.path),))


def _spec(**fields):
    from crossdock.queue.models import JobSpec

    if "python" not in fields:
        fields.setdefault("command", ["true"])
    fields.setdefault("stdout", "/dev/null")  # no slurm-<id>.out wherever the worker runs
    return JobSpec(**fields)


def test_hold_and_release_flip_only_the_flag(users, service_rt):
    from crossdock import service

    rt = service_rt
    [job] = service.submit(rt, [_spec(name="naïve job", env={"A": "ü/\\"}, nice=5)])
    key = rt.store.k.job(job.id)
    before = rt.store.r.hget(key, "spec")
    assert service.hold(rt, [str(job.id)], True) == [(job, True)]
    assert rt.store.get(job.id).spec.hold
    assert service.hold(rt, [str(job.id)], False)[0][1]
    assert rt.store.r.hget(key, "spec") == before


def test_the_embedded_redis_keeps_its_files_private(tmp_path):
    from crossdock.backends.redis_store import embedded

    state = tmp_path / "state"
    url = embedded.ensure_running(state)
    try:
        import redis

        redis.Redis.from_url(url).set("k", "v")
        files = [p for p in (state / "redis").rglob("*") if p.is_file() and p.suffix != ".sock"]
        assert any("aof" in p.name for p in files), files
        assert {p.name: p.stat().st_mode & 0o777 for p in files} == {p.name: 0o600 for p in files}
        dirs = [state, state / "redis", *[p for p in (state / "redis").rglob("*") if p.is_dir()]]
        assert {str(d): d.stat().st_mode & 0o777 for d in dirs} == {str(d): 0o700 for d in dirs}
    finally:
        embedded.stop(state)


def test_an_issued_key_lets_the_second_user_seal_what_the_service_accepts(users, service_rt):
    from crossdock import signing
    from crossdock.queue.errors import BadSignature
    from crossdock.queue.models import JobSpec, PythonCall

    key_file = Path(issued_key(users)["CROSSDOCK_SIGNING_KEY"])
    assert (key_file.stat().st_uid, key_file.stat().st_mode & 0o777) == (users["uid"], 0o600)
    code = ("from crossdock import Client, service\n"
            "c = Client()\nprint(service.sign_payload(c.runtime, c.who, 'eA=='))\n")
    signed = run_as_second(users, ["-c", code], {"CROSSDOCK_SIGNING_KEY": str(key_file)})
    assert signed.returncode == 0, signed.stderr
    state = service_rt.settings.state_dir
    spec = JobSpec(user=SECOND, python=PythonCall(payload="eA==", signature=signed.stdout.strip()))
    signing.check_payload(state, spec, "payload")  # the service accepts it for the second user
    with pytest.raises(BadSignature):
        signing.check_payload(state, spec.model_copy(update={"user": "root"}), "payload")
    # Without the issued key its client seals with a key of its own making: the service refuses that.
    own = run_as_second(users, ["-c", code])
    assert own.returncode == 0, own.stderr
    with pytest.raises(BadSignature):
        signing.check_payload(state, spec.model_copy(update={"python": PythonCall(
            payload="eA==", signature=own.stdout.strip())}), "payload")


def test_filtered_cancel_and_listings_keep_to_the_callers_own_jobs(users, service_rt):
    """scancel -t PD as a user cancels that user's pending jobs only; naming root's jobs is refused."""
    from crossdock import service

    [roots] = service.submit(service_rt, [_spec(hold=True, name="shared")])
    r = as_second(users, "submit", "--parsable", "-H", "-J", "shared", "--wrap", "true")
    assert r.returncode == 0, r.stderr
    mine = int(r.stdout)
    listed = as_second(users, "queue", "--me", "-h", "-o", "%i %u")
    assert listed.stdout.splitlines() == [f"{mine} {SECOND}"], listed
    refused = as_second(users, "cancel", "-u", "root", "-t", "PD")
    assert refused.returncode == 2 and f"job {roots.id}" in refused.stderr, refused
    done = as_second(users, "cancel", "-v", "-n", "shared", "-t", "PD")
    assert done.returncode == 0 and done.stdout.splitlines() == [f"{mine}: CANCELLED"], done
    assert service_rt.store.get(roots.id).state is JobState.PENDING
    assert service_rt.store.get(mine).state is JobState.CANCELLED
