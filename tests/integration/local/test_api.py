"""The REST API against a real store, through a real server: submissions as the CLI's dry run
prints them, the same admission and messages, two users' tokens and the ownership rules, token
management, streamed logs, and local users known by the Unix socket's peer credentials."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import httpx
import pytest

from crossdock import service
from crossdock.queue.errors import InvalidJob
from crossdock.queue.models import JobSpec
from crossdock.queue.states import JobState
from tests.integration.local.rest import ApiServer, make_token
from tests.integration.local.test_users import second_user

pytestmark = [pytest.mark.operate, pytest.mark.redis]


@pytest.fixture
def api(runtime):
    sent = []
    server = ApiServer(runtime, send=lambda *task: sent.append(task))
    server.sent = sent
    with httpx.Client(base_url=server.url, timeout=30) as client:
        server.client = client
        yield server
    server.close()


def crossdock_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "crossdock", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, **(env or {})})


def test_the_cli_dry_run_json_posts_back_as_the_same_job(api, runtime, tmp_path):
    dry = crossdock_cli("submit", "--dry-run", "--json", "-J", "train", "-c", "2", "--mem=1G", "-t", "10",
                        "-o", "out-%j.txt", "--export=NONE,A=1", "-D", str(tmp_path), "--hold", "--wrap", "echo hi")
    assert dry.returncode == 0, dry.stderr
    body = json.loads(dry.stdout)
    alice = make_token(runtime.store, "alice")
    again = api.client.post("/v1/jobs", params={"dry_run": True}, json=body, headers=alice)
    assert again.status_code == 200, again.text
    assert again.json() == [body]
    stored = api.client.post("/v1/jobs", json=body, headers=alice)
    assert stored.status_code == 201, stored.text
    job = runtime.store.get(stored.json()["job_id"])
    assert (job.spec.user, job.spec.name, job.spec.cpus_per_task, job.spec.mem_per_node_mib) == ("alice", "train", 2, 1024)
    assert (job.spec.command, job.spec.stdout, job.spec.workdir, job.spec.time_limit_seconds) == (
        ["/bin/sh", "-c", "echo hi"], "out-%j.txt", str(tmp_path), 600)
    assert job.spec.env == {"A": "1"} and job.state is JobState.PENDING and job.spec.hold


def test_every_problem_of_a_body_at_once(api, runtime):
    r = api.client.post("/v1/jobs", json={"command": ["true"], "cpus_per_task": 0, "nodes": "x", "bogus": 1,
                                          "signal": {"number": 99}}, headers=make_token(runtime.store, "alice"))
    assert r.status_code == 422
    assert r.json() == {"error": "InvalidSubmission", "problems": [
        "cpus_per_task: invalid value 0; Input should be greater than or equal to 1",
        "nodes: invalid value 'x'; Input should be a valid integer, unable to parse string as an integer",
        "signal.number: invalid value 99; Input should be less than or equal to 64",
        "bogus: invalid value 1; not a field of a submission; see `crossdock submit --dry-run --json` for the fields"]}
    r = api.client.post("/v1/jobs", json={"command": ["true"], "mem_per_cpu_mib": 1, "mem_per_node_mib": 1},
                        headers=make_token(runtime.store, "alice"))
    assert r.status_code == 422 and r.json()["problems"] == ["--mem and --mem-per-cpu are mutually exclusive; give one"]
    assert runtime.store.all_ids() == []


def test_admission_refuses_as_the_cli_does_with_the_same_message(api, runtime, tmp_path):
    spec = JobSpec(command=["true"], partition="nosuch", workdir=str(tmp_path), user="alice")
    with pytest.raises(InvalidJob) as refused:
        service.check(runtime, [spec], service.load_inventory(runtime), service.Caller("alice", False))
    cli = crossdock_cli("submit", "--partition", "nosuch", "--wrap", "true")
    assert cli.returncode == 2 and cli.stderr.strip() == f"crossdock: error: {refused.value}"
    r = api.client.post("/v1/jobs", json={"command": ["true"], "partition": "nosuch", "chdir": str(tmp_path)},
                        headers=make_token(runtime.store, "alice"))
    assert (r.status_code, r.json()) == (400, {"error": "InvalidJob", "problems": [str(refused.value)]})
    r = api.client.post("/v1/jobs", json={"command": ["true"], "chdir": "relative/dir"},
                        headers=make_token(runtime.store, "alice"))
    assert r.status_code == 400 and "chdir: 'relative/dir' is relative" in r.json()["problems"][0]
    assert runtime.store.all_ids() == []


def refusals(store, job_id: int) -> list[tuple[str, str]]:
    return [(e["actor"], e["action"]) for e in store.events(job_id) if e.get("event") == "refused"]


def test_two_users_tokens_each_acts_only_on_their_own_jobs(api, runtime, tmp_path):
    store = runtime.store
    alice, bob = make_token(store, "alice"), make_token(store, "bob")
    admin = make_token(store, "carol", admin=True)
    body = {"command": ["sleep", "60"], "hold": True, "chdir": str(tmp_path), "env": {"SECRET": "alices"}}
    job_id = api.client.post("/v1/jobs", json=body, headers=alice).json()["job_id"]
    for action in ("cancel", "hold", "release", "requeue"):
        r = api.client.post(f"/v1/jobs/{job_id}/{action}", headers=bob)
        assert r.status_code == 403, (action, r.text)
        assert r.json()["problems"] == [f"{action} job {job_id}: it belongs to 'alice' and you are 'bob';"
                                        " only its owner or an admin may"]
    assert api.client.delete(f"/v1/jobs/{job_id}", headers=bob).status_code == 403
    logs = api.client.get(f"/v1/jobs/{job_id}/logs", headers=bob)
    assert logs.status_code == 403 and "read the output of" in logs.json()["problems"][0]
    assert refusals(store, job_id) == [("bob", a) for a in ("cancel", "hold", "release", "requeue", "cancel",
                                                             "read the output of")]
    job = store.get(job_id)
    assert job.state is JobState.PENDING and job.spec.hold and job.spec.user == "alice"
    # bob reads the job, but not alice's environment; alice and an admin see it whole
    assert api.client.get(f"/v1/jobs/{job_id}", headers=bob).json()[0]["spec"]["env"] == {}
    assert api.client.get(f"/v1/jobs/{job_id}", headers=alice).json()[0]["spec"]["env"] == {"SECRET": "alices"}
    # submitting in another's name: refused, with an event in the global stream
    r = api.client.post("/v1/jobs", json={**body, "user": "alice"}, headers=bob)
    assert r.status_code == 403 and "only an admin submits for others" in r.json()["problems"][0]
    refused = [e for e in store.read_events(count=50) if e.get("event") == "refused" and e.get("action") == "submit"]
    assert refused and refused[-1]["actor"] == "bob" and "not you" in refused[-1]["reason"]
    # the owner and an admin may
    assert api.client.post(f"/v1/jobs/{job_id}/release", headers=alice).json()[0]["done"] is True
    assert api.client.post(f"/v1/jobs/{job_id}/hold", headers=admin).json()[0]["done"] is True
    assert api.client.post(f"/v1/jobs/{job_id}/cancel", headers=alice).json() == [
        {"job": str(job_id), "done": True, "outcome": "CANCELLED"}]
    assert store.get(job_id).state is JobState.CANCELLED
    theirs = api.client.post("/v1/jobs", json={**body, "user": "alice"}, headers=admin)
    assert theirs.status_code == 201 and store.get(theirs.json()["job_id"]).spec.user == "alice"


def test_an_array_is_one_submission_and_one_reference(api, runtime, tmp_path):
    headers = {**make_token(runtime.store, "alice"), "Idempotency-Key": "array-once"}
    body = {"command": ["true"], "hold": True, "chdir": str(tmp_path), "array": {"task_ids": [0, 1, 2]}}
    r = api.client.post("/v1/jobs", json=body, headers=headers)
    assert r.status_code == 201, r.text
    again = api.client.post("/v1/jobs", json=body, headers=headers)
    assert again.json() == r.json() and len(r.json()["jobs"]) == 3  # the same key stores it once
    assert len(runtime.store.all_ids()) == 3
    array = r.json()["job_id"]
    shown = api.client.get(f"/v1/jobs/{array}", headers=headers).json()
    assert [j["display_id"] for j in shown] == [f"{array}_{t}" for t in (0, 1, 2)]
    assert [o["outcome"] for o in api.client.post(f"/v1/jobs/{array}_1/cancel", headers=headers).json()] == ["CANCELLED"]
    states = [j["state"] for j in api.client.get(f"/v1/jobs/{array}", headers=headers).json()]
    assert states == ["PENDING", "CANCELLED", "PENDING"]


def test_no_bad_or_revoked_token_is_401(api, runtime):
    r = api.client.get("/v1/jobs")
    assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer"
    assert api.client.get("/v1/jobs", headers={"Authorization": "Bearer nonsense"}).status_code == 401
    user = second_user().pw_name  # a service run as root gives tokens only to users with an account
    made = crossdock_cli("tokens", "create", user, "--json")
    assert made.returncode == 0, made.stderr
    token = json.loads(made.stdout)
    headers = {"Authorization": f"Bearer {token['token']}"}
    assert api.client.get("/v1/whoami", headers=headers).json() == {"user": user, "admin": False,
                                                                     "via": f"token {token['id']}"}
    tampered = {"Authorization": f"Bearer {token['token'][:-1]}{'A' if token['token'][-1] != 'A' else 'B'}"}
    assert api.client.get("/v1/whoami", headers=tampered).status_code == 401
    listed = json.loads(crossdock_cli("tokens", "list", "--json").stdout)
    assert [(t["id"], t["user"], t["admin"]) for t in listed] == [(token["id"], user, False)]
    assert token["token"] not in json.dumps(runtime.store.access.tokens())  # only its hash is kept
    assert api.client.get("/v1/whoami", headers=headers).status_code == 200
    assert crossdock_cli("tokens", "revoke", token["id"]).returncode == 0
    r = api.client.get("/v1/whoami", headers=headers)  # the very next request
    assert r.status_code == 401 and "unknown or revoked" in r.json()["problems"][0]
    events = [e["event"] for e in runtime.store.read_events(count=10) if e.get("token") == token["id"]]
    assert events == ["token_created", "token_revoked"]
    for args, message in ((("create", "a b"), "USER: 'a b' is not a user name"),
                          (("revoke", token["id"]), f"TOKEN: no token {token['id']!r}")):
        bad = crossdock_cli("tokens", *args)
        assert bad.returncode == 2 and bad.stderr.startswith(f"crossdock: error: {message}"), bad.stderr
        assert len(bad.stderr.splitlines()) == 1


def test_reads_queues_pools_history_and_status(api, runtime, tmp_path):
    headers = make_token(runtime.store, "alice")
    api.client.post("/v1/jobs", json={"command": ["true"], "hold": True, "chdir": str(tmp_path)}, headers=headers)
    api.client.post("/v1/jobs", json={"command": ["true"], "chdir": str(tmp_path), "queue": "training"}, headers=headers)
    queues = {q["queue"]: q for q in api.client.get("/v1/queues", headers=headers).json()}
    assert (queues["preprocessing"]["held"], queues["training"]["pending"]) == (1, 1)
    assert queues["training"]["oldest_wait_seconds"] is not None
    pools = api.client.get("/v1/pools", headers=headers).json()
    assert pools[0]["pool"] == "local" and pools[0]["gpu_models"]["A100"]["free"] == 2
    assert api.client.get("/v1/jobs", params={"state": "PD", "queue": "training"}, headers=headers).json()[0]["queue"] == "training"
    assert api.client.get("/v1/jobs", params={"state": "XX"}, headers=headers).status_code == 400
    assert api.client.get("/v1/history", headers=headers).json() == []
    assert api.client.get("/v1/autoscaler", headers=headers).json() == {"at": None, "fleets": [], "pools": []}
    assert api.client.get("/v1/descheduler", headers=headers).json()["enabled"] is False
    assert api.client.get("/v1/jobs/999999", headers=headers).status_code == 404
    events = api.client.get("/v1/events", params={"count": 1}, headers=headers).json()
    later = api.client.get("/v1/events", params={"after": events[0]["id"]}, headers=headers).json()
    assert len(events) == 1 and later == []


@pytest.mark.celery
def test_logs_stream_until_the_job_ends(runtime, cluster, tmp_path):
    server = ApiServer(runtime, send=cluster.send)
    try:
        headers = make_token(runtime.store, "root")
        with httpx.Client(base_url=server.url, timeout=60) as client:
            body = {"command": ["/bin/sh", "-c", "echo first; sleep 2; echo second"], "chdir": str(tmp_path)}
            job_id = client.post("/v1/jobs", json=body, headers=headers).json()["job_id"]
            cluster.wait(job_id, {JobState.RUNNING, JobState.COMPLETED})
            chunks = []
            with client.stream("GET", f"/v1/jobs/{job_id}/logs", params={"follow": True}, headers=headers) as r:
                assert r.status_code == 200
                for chunk in r.iter_text():
                    chunks.append(chunk)
            assert "".join(chunks) == "first\nsecond\n"
            assert runtime.store.get(job_id).state is JobState.COMPLETED  # the stream ended with the job
    finally:
        server.close()


def test_logs_are_served_only_from_the_owners_own_files(api, runtime, tmp_path):
    """The API runs as root here, and reads any file: a job whose output names someone else's
    file (or a link to one) does not get it read for its owner."""
    t2 = second_user()
    mine = make_token(runtime.store, t2.pw_name)
    admin = make_token(runtime.store, "root", admin=True)
    link = tmp_path / "out.txt"
    link.symlink_to(tmp_path / "elsewhere.txt")
    (tmp_path / "elsewhere.txt").write_text("not yours\n")
    for output in ("/etc/hostname", str(link)):
        body = {"command": ["true"], "hold": True, "chdir": str(tmp_path), "output": output, "user": t2.pw_name}
        job_id = api.client.post("/v1/jobs", json=body, headers=admin).json()["job_id"]
        r = api.client.get(f"/v1/jobs/{job_id}/logs", headers=mine)
        assert r.status_code == 403, r.text
        assert "not served" in r.json()["problems"][0] or "cannot be served" in r.json()["problems"][0]
        assert refusals(runtime.store, job_id) == [(t2.pw_name, "read the output of")]
    own = tmp_path / "own.txt"
    own.write_text("yours\n")
    os.chown(own, t2.pw_uid, t2.pw_gid)
    body = {"command": ["true"], "hold": True, "chdir": str(tmp_path), "output": str(own), "user": t2.pw_name}
    job_id = api.client.post("/v1/jobs", json=body, headers=admin).json()["job_id"]
    r = api.client.get(f"/v1/jobs/{job_id}/logs", headers=mine)
    assert (r.status_code, r.text) == (200, "yours\n")


PEER_CLIENT = textwrap.dedent("""
    import socket, sys
    s = socket.socket(socket.AF_UNIX)
    s.connect(sys.argv[1])
    s.sendall(f"{sys.argv[2]} {sys.argv[3]} HTTP/1.1\\r\\nHost: x\\r\\nContent-Length: 0\\r\\nConnection: close\\r\\n\\r\\n".encode())
    data = b""
    while chunk := s.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\\r\\n\\r\\n")
    print(head.split()[1].decode(), body.decode())
""")


def test_local_users_are_known_by_the_unix_sockets_peer_credentials(runtime, tmp_path):
    """``crossdock api --uds``: no token, the kernel names each caller; the socket goes with the server."""
    t2 = second_user()
    home = Path(f"/tmp/crossdock-api-{uuid.uuid4().hex[:8]}")
    home.mkdir(mode=0o755)
    sock = home / "run" / "api.sock"
    log = tmp_path / "api.log"
    with open(log, "wb") as out:
        server = subprocess.Popen([sys.executable, "-m", "crossdock", "api", "--uds", str(sock), "--log-level", "warning"],
                                  stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + 60
        while not sock.exists():
            assert server.poll() is None and time.monotonic() < deadline, log.read_text()
            time.sleep(0.1)
        assert sock.stat().st_mode & 0o777 == 0o666
        with httpx.Client(transport=httpx.HTTPTransport(uds=str(sock)), base_url="http://crossdock", timeout=30) as client:
            assert client.get("/v1/whoami").json() == {"user": "root", "admin": True, "via": "peer uid 0"}
            job_id = client.post("/v1/jobs", json={"command": ["true"], "hold": True, "chdir": str(tmp_path)}).json()["job_id"]

        def as_second_user(method: str, path: str) -> tuple[int, dict]:
            out = subprocess.run(["/usr/bin/python3", "-c", PEER_CLIENT, str(sock), method, path], user=t2.pw_uid,
                                 group=t2.pw_gid, extra_groups=[], capture_output=True, text=True, timeout=30, cwd="/")
            assert out.returncode == 0, out.stderr
            status, _, body = out.stdout.partition(" ")
            return int(status), json.loads(body)

        assert as_second_user("GET", "/v1/whoami") == (200, {"user": t2.pw_name, "admin": False,
                                                             "via": f"peer uid {t2.pw_uid}"})
        status, body = as_second_user("POST", f"/v1/jobs/{job_id}/cancel")
        assert status == 403 and body["problems"][0].endswith(f"you are {t2.pw_name!r}; only its owner or an admin may")
        assert refusals(runtime.store, job_id) == [(t2.pw_name, "cancel")]
        assert runtime.store.get(job_id).state is JobState.PENDING
        server.terminate()
        assert server.wait(15) == 0, log.read_text()
        assert not sock.exists()  # the server took its socket with it
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
        sock.unlink(missing_ok=True)
        sock.parent.rmdir()
        home.rmdir()


def test_why_a_job_pends_says_what_would_start_it_sooner_to_its_owner_only(api, runtime, tmp_path):
    """Both of the machine's GPUs go to alice's first training job; her second waits for it, but
    would start now in the inference or preprocessing queue (their priority comes first). Bob may
    not ask."""
    alice, bob = make_token(runtime.store, "alice"), make_token(runtime.store, "bob")
    body = {"command": ["true"], "chdir": str(tmp_path), "partition": "training", "gpus": {"count": 2}, "time_limit_seconds": 600}
    first = api.client.post("/v1/jobs", json=body, headers=alice).json()["job_id"]
    second = api.client.post("/v1/jobs", json=body, headers=alice).json()["job_id"]
    r = api.client.get(f"/v1/jobs/{second}/why", headers=alice)
    assert r.status_code == 200, r.text
    report = r.json()
    assert (report["job"], report["state"]) == (second, "PENDING") and report["start"] is not None
    moves = [o for o in report["options"] if o["field"] == "queue"]
    assert [(o["value"], o["change"]) for o in moves] == [("inference", "-p inference (not training)"),
                                                          ("preprocessing", "-p preprocessing (not training)")]
    assert all(o["start"] < report["start"] for o in moves)
    assert api.client.get(f"/v1/jobs/{first}/why", headers=alice).json()["reason"] == "fits now"
    refused = api.client.get(f"/v1/jobs/{second}/why", headers=bob)
    assert refused.status_code == 403 and refused.json()["problems"] == [
        f"why job {second}: it belongs to 'alice' and you are 'bob'; only its owner or an admin may"]
    assert api.client.get("/v1/jobs/999999/why", headers=alice).status_code == 404
