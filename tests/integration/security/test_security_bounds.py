"""A multi-user site's bounds: one user's idempotency token never answers another's submission, on
every face; no local user starves the service (a flood of huge lines and idle connections is
refused with the limit's line while the service's memory and threads stay bounded); every input
over one of the config's ``limits:`` is refused naming its key; a Python submission retried after
a lost reply is stored once.

Real Redis; the real ``up --multi-user`` service and a real second Unix user where a socket is
involved (``tests/integration/local/test_users_socket.py``'s fixture).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
import redis
import yaml

from crossdock.queue.states import JobState
from tests.conftest import TEST_CONFIG
from tests.integration.local.rest import ApiServer, make_token
from tests.integration.local.test_users import SECOND, shared_redis  # noqa: F401
from tests.integration.local.test_users_socket import as_second, cli_as_second, root_client, service  # noqa: F401

pytestmark = [pytest.mark.security, pytest.mark.redis]
MIB = 1024 * 1024
FLOOD = Path(__file__).with_name("flood.py")


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM (peak resident) in KiB and Threads of process ``pid``."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return {k: int(fields[k].split()[0]) for k in ("VmRSS", "VmHWM", "Threads")}


# --- the multi-user socket ---------------------------------------------------------------------

@pytest.mark.celery
@pytest.mark.parametrize("service", [{"limits": {"idle_timeout_s": 20}}], indirect=True)
def test_a_flood_is_refused_by_its_limits_and_the_service_stays_bounded(service):  # noqa: F811
    client = root_client()
    client.gateway.ids("queued")  # warm: the service has answered once
    before = proc_status(service["pid"])
    script = service["home"] / "flood.py"
    shutil.copy(FLOOD, script)
    script.chmod(0o644)
    floods, idle, per_user = 4, 300, 32  # four 100 MiB lines; 300 idle connections; the default cap
    with subprocess.Popen([service["python"], str(script), str(service["sock"]), str(floods), "100", str(idle),
                           str(per_user)], user=service["uid"], group=service["gid"], extra_groups=[],
                          env=service["env"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) as flood:
        seen = json.loads(flood.stdout.readline())
        during = proc_status(service["pid"])
        print(f"\nservice (up, pid {service['pid']}) before: {before}; while {idle} idle connections are held after"
              f" {floods} lines of 100 MiB: {during}")
        assert len(seen["floods"]) == floods
        for answer in seen["floods"]:
            error = json.loads(answer.splitlines()[0])["error"]
            assert error["type"] == "LimitExceeded" and "limits.max_request_bytes" in error["message"], answer
        assert (seen["open"], seen["refused"]) == (per_user, idle - per_user), seen
        refusal = json.loads(seen["refusal"].splitlines()[0])["error"]["message"]
        assert "limits.max_connections_per_user" in refusal and f"{per_user} per user" in refusal
        # bounded: two 16 MiB requests of one user at a time (not 400 MiB); a thread per kept connection only
        assert during["VmHWM"] - before["VmRSS"] < 200 * 1024, (before, during)
        assert during["Threads"] <= before["Threads"] + per_user + 4, (before, during)
        assert client.gateway.ids("queued") == []  # root is still served beside the flooding user
        flood.stdin.write("wait for the idle timeout\n")
        flood.stdin.flush()
        closed = json.loads(flood.stdout.readline())
        assert closed == {"closed_by_service": per_user, "still_open": 0}
        flood.stdin.close()
        assert flood.wait(60) == 0
    assert "Traceback" not in service["log"].read_text()


@pytest.mark.celery
def test_an_idempotency_key_is_its_owners_on_the_socket(service):  # noqa: F811
    token = uuid.uuid4().hex
    mine = root_client().submit_command(["true"], hold=True, stdout="/dev/null", token=token)
    by_cli = cli_as_second(service, "submit", "--parsable", "-H", "--wrap", "true")
    assert by_cli.returncode == 0, by_cli.stderr
    theirs = cli_as_second(service, "submit", "--parsable", "-H", "--wrap", "true")  # no token: another job
    assert theirs.stdout != by_cli.stdout
    env = {"CROSSDOCK_IDEMPOTENCY_TOKEN": token}
    first = as_second(service, ["-m", "crossdock.cli.main", "submit", "--parsable", "-H", "--wrap", "true"], env)
    again = as_second(service, ["-m", "crossdock.cli.main", "submit", "--parsable", "-H", "--wrap", "true"], env)
    assert first.returncode == again.returncode == 0, first.stderr + again.stderr
    assert int(first.stdout) != mine.id and first.stdout == again.stdout  # root's token is not theirs
    api = as_second(service, ["-c", "from crossdock import Client\nprint(Client().submit_command(['true'], hold=True,"
                                    f" token={token!r}).id)"])
    assert api.returncode == 0, api.stderr
    assert api.stdout.strip() == first.stdout.strip()  # the same owner's token, through the Python API
    jobs = root_client().gateway.jobs([mine.id, int(first.stdout)])
    assert [(j.id, j.spec.user) for j in jobs] == [(mine.id, "root"), (int(first.stdout), SECOND)]


@pytest.mark.celery
@pytest.mark.parametrize("service", [{"limits": {"max_submit_jobs": 3, "max_connections_per_user": 4}}],
                         indirect=True)
def test_inputs_over_the_limits_are_refused_naming_their_key_on_the_socket(service):  # noqa: F811
    big = service["work"] / "big.sh"
    big.write_text("#!/bin/sh\n" + "# padding\n" * (5 * MIB // 10))
    os.chown(big, service["uid"], service["gid"])
    r = cli_as_second(service, "submit", "-H", "big.sh")
    assert r.returncode == 2 and "limits.max_script_size" in r.stderr and "4194304" in r.stderr, r.stderr
    many = {f"V{i}": "x" for i in range(5000)}
    r = as_second(service, ["-m", "crossdock.cli.main", "submit", "-H", "--wrap", "true"], many)
    assert r.returncode == 2 and "limits.max_env_vars" in r.stderr, r.stderr
    r = cli_as_second(service, "submit", "-H", "--array=0-5000", "--wrap", "true")
    assert r.returncode == 2 and "MaxArraySize" in r.stderr, r.stderr
    array = cli_as_second(service, "submit", "--parsable", "-H", "--array=0-2", "--wrap", "true")
    assert array.returncode == 0, array.stderr
    r = cli_as_second(service, "submit", "-H", "--wrap", "true")
    assert r.returncode == 2 and "limits.max_submit_jobs" in r.stderr and "3 pending or running + 1" in r.stderr, r.stderr
    root_client().submit_command(["true"], hold=True, stdout="/dev/null")  # another user's count is theirs
    assert cli_as_second(service, "cancel", f"{array.stdout.strip()}_0").returncode == 0
    again = cli_as_second(service, "submit", "--parsable", "-H", "--wrap", "true")
    assert again.returncode == 0, again.stderr  # a cancelled task no longer counts
    with hold_connections(service, 4):  # the user's every connection taken: the CLI says which limit
        for argv in (("queue",), ("submit", "-H", "--wrap", "true")):
            r = cli_as_second(service, *argv)
            assert r.returncode != 0 and "limits.max_connections_per_user (4 per user)" in r.stderr, r.stderr
            assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert cli_as_second(service, "queue").returncode == 0  # given back, served again
    text = service["log"].read_text()
    assert "Traceback" not in text + r.stderr


@contextmanager
def hold_connections(svc, n: int):
    """``n`` idle connections of the second user to the service, held while the body runs."""
    script = svc["home"] / "flood.py"
    shutil.copy(FLOOD, script)
    script.chmod(0o644)
    with subprocess.Popen([svc["python"], str(script), str(svc["sock"]), "0", "0", str(n), str(n)],
                          user=svc["uid"], group=svc["gid"], extra_groups=[], env=svc["env"], stdin=subprocess.PIPE,
                          stdout=subprocess.PIPE, text=True) as held:
        seen = json.loads(held.stdout.readline())
        assert (seen["open"], seen["refused"]) == (n, 0), seen
        try:
            yield
        finally:
            held.stdin.close()
            held.wait(60)


# --- the REST API --------------------------------------------------------------------------------

@pytest.fixture
def limited(crossdock_env):
    """A runtime whose config has small limits."""
    from crossdock.runtime import Runtime

    Path(crossdock_env["CROSSDOCK_CONFIG"]).write_text(yaml.safe_dump(
        {**TEST_CONFIG, "limits": {"max_script_size": 1000, "max_env_vars": 5, "max_env_bytes": 500,
                                   "max_submit_jobs": 3, "max_request_bytes": 64 * 1024}}))
    return Runtime.from_env()


@contextmanager
def api_of(rt):
    """The REST API over ``rt`` in a thread, with an HTTP client to it (its sender a sink)."""
    server = ApiServer(rt, send=lambda *task: None)
    with httpx.Client(base_url=server.url, timeout=60) as client:
        server.client = client
        yield server
    server.close()


@pytest.fixture
def api(runtime):
    with api_of(runtime) as server:
        yield server


@pytest.fixture
def limited_api(limited):
    with api_of(limited) as server:
        yield server


def test_an_idempotency_key_is_its_owners_on_rest(api, runtime, tmp_path):
    alice, bob = make_token(runtime.store, "alice"), make_token(runtime.store, "bob")
    body = {"command": ["true"], "hold": True, "chdir": str(tmp_path)}
    key = {"Idempotency-Key": "shared-key"}
    a = api.client.post("/v1/jobs", json=body, headers={**alice, **key})
    b = api.client.post("/v1/jobs", json=body, headers={**bob, **key})
    assert a.status_code == b.status_code == 201, a.text + b.text
    assert a.json()["job_id"] != b.json()["job_id"]  # bob's submission is stored, not alice's returned
    assert api.client.post("/v1/jobs", json=body, headers={**bob, **key}).json() == b.json()
    assert api.client.post("/v1/jobs", json=body, headers={**alice, **key}).json() == a.json()
    owners = {j.id: j.spec.user for j in runtime.store.get_many(runtime.store.all_ids())}
    assert owners == {a.json()["job_id"]: "alice", b.json()["job_id"]: "bob"}
    runtime.store.cancel(a.json()["job_id"])
    assert runtime.store.expire_finished(0, 86400) == 1  # alice's job moved to history
    late = api.client.post("/v1/jobs", json=body, headers={**alice, **key})
    assert late.status_code == 400 and "moved to history" in late.json()["problems"][0], late.text


def test_a_rest_body_over_the_limit_is_413_naming_it(api, runtime, tmp_path):
    alice = make_token(runtime.store, "alice")
    huge = json.dumps({"command": ["true"], "chdir": str(tmp_path), "name": "x" * (17 * MIB)})
    declared = api.client.post("/v1/jobs", content=huge, headers={**alice, "Content-Type": "application/json"})

    def chunks():
        for i in range(0, len(huge), MIB):
            yield huge[i:i + MIB].encode()

    streamed = api.client.post("/v1/jobs", content=chunks(), headers={**alice, "Content-Type": "application/json"})
    for r in (declared, streamed):
        assert r.status_code == 413, r.text
        assert r.json() == {"error": "RequestTooLarge", "problems": [
            "request body: over the limit is over limits.max_request_bytes (16777216 bytes); send less (pass large"
            " data by path), or ask an admin to raise limits.max_request_bytes"]}
    assert runtime.store.all_ids() == []
    ok = api.client.post("/v1/jobs", json={"command": ["true"], "chdir": str(tmp_path), "hold": True}, headers=alice)
    assert ok.status_code == 201, ok.text


def test_inputs_over_the_limits_are_refused_naming_their_key_on_rest(limited_api, limited, tmp_path):
    alice, bob = make_token(limited.store, "alice"), make_token(limited.store, "bob")
    base = {"command": ["true"], "hold": True, "chdir": str(tmp_path)}

    def refused(body, headers=alice):
        r = limited_api.client.post("/v1/jobs", json={**base, **body}, headers=headers)
        assert r.status_code == 400 and r.json()["error"] == "LimitExceeded", r.text
        return r.json()["problems"][0]

    assert "limits.max_script_size (1000 bytes" in refused({"command": None, "script": "#!/bin/sh\n" + "#" * 2000})
    both = refused({"env": {f"V{i}": "y" * 100 for i in range(6)}})
    assert "limits.max_env_vars" in both and "limits.max_env_bytes" in both  # every problem at once
    assert "scheduler.max_array_size" in refused({"array": {"task_ids": [0, 2000]}})
    assert limited_api.client.post("/v1/jobs", json={**base, "array": {"task_ids": [0, 1, 2]}},
                                   headers=alice).status_code == 201
    assert "limits.max_submit_jobs" in refused({})
    assert limited_api.client.post("/v1/jobs", json=base, headers=bob).status_code == 201  # per user
    big = limited_api.client.post("/v1/jobs", json={**base, "name": "n" * 70000}, headers=bob)
    assert big.status_code == 413 and "limits.max_request_bytes (65536 bytes)" in big.json()["problems"][0]
    first = min(limited.store.all_ids())
    limited.store.cancel(first)
    assert limited.store.get(first).state is JobState.CANCELLED
    assert limited_api.client.post("/v1/jobs", json=base, headers=alice).status_code == 201


# --- the Python API: a retry never stores twice ---------------------------------------------------

class DropAfterWrite:
    """A TCP proxy to Redis that, once armed, forwards every command but cuts the connection at
    the first reply Redis sends once a job exists (the reply of the step that stored it): the
    client sees a connection error after its write took effect. :meth:`stop` refuses every
    later connection."""

    def __init__(self, upstream_port: int, direct: redis.Redis):
        self.upstream, self.direct = upstream_port, direct
        self.armed = threading.Event()
        self.cut = threading.Event()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        threading.Thread(target=self._accept, daemon=True).start()

    def stop(self) -> None:
        # a close alone leaves the accepting thread's accept() listening for one more connection
        try:
            self.listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.listener.close()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            try:
                up = socket.create_connection(("127.0.0.1", self.upstream))
            except OSError:  # Redis gone (its test ending): the client sees its connection closed
                down.close()
                continue
            threading.Thread(target=self._pump, args=(down, up, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(up, down, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, to_redis: bool) -> None:
        try:
            while data := src.recv(65536):
                if not to_redis and self.armed.is_set() and self._stored():
                    self.armed.clear()
                    self.cut.set()
                    break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            s.close()

    def _stored(self) -> bool:
        return any(True for _ in self.direct.scan_iter("*:job:*", count=1000))


def test_a_python_submit_whose_reply_is_lost_is_stored_once(crossdock_env, shared_redis, monkeypatch):  # noqa: F811
    from crossdock import Client
    from crossdock.runtime import Runtime

    direct = redis.Redis.from_url(shared_redis)
    proxy = DropAfterWrite(direct.connection_pool.connection_kwargs["port"], direct)
    monkeypatch.setenv("CROSSDOCK_REDIS_URL", f"redis://127.0.0.1:{proxy.port}/0")
    client = Client(Runtime.from_env())
    client.gateway.ids("queued")  # connected and warm
    proxy.armed.set()
    handle = client.submit_command(["true"], hold=True, stdout="/dev/null")
    assert proxy.cut.is_set()  # the reply of the step that stored it was lost
    stored = [k for k in direct.scan_iter("*:job:*") if k.decode().split(":")[-1].isdigit()]
    assert [int(k.decode().rsplit(":", 1)[1]) for k in stored] == [handle.id]  # one job, the handle's
    proxy.stop()


def test_a_python_submit_to_an_away_store_raises_store_unavailable(crossdock_env, shared_redis,  # noqa: F811
                                                                   monkeypatch):
    from crossdock import Client, client as api
    from crossdock.queue.errors import StoreUnavailable
    from crossdock.runtime import Runtime

    direct = redis.Redis.from_url(shared_redis)
    proxy = DropAfterWrite(direct.connection_pool.connection_kwargs["port"], direct)
    monkeypatch.setenv("CROSSDOCK_REDIS_URL", f"redis://127.0.0.1:{proxy.port}/0")
    monkeypatch.setattr(api, "SUBMIT_RETRY_SECONDS", 1.0)
    client = Client(Runtime.from_env())
    client.gateway.ids("queued")
    proxy.stop()  # nobody answers there any more
    client.runtime.store.r.connection_pool.disconnect()
    with pytest.raises(StoreUnavailable, match="the store does not answer"):
        client.submit_command(["true"], hold=True, stdout="/dev/null")
