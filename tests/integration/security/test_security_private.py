"""What one user sees of another's (Slurm's PrivateData), tokens, and the CLI of a user in a
multi-user installation: ``crossdock up --multi-user`` as root (its embedded Redis, its socket),
root's job with a ``DB_PASSWORD=`` in its script and its exported environment, and a real second
Unix user (``crossdock-t2``) reading it through the socket CLI and the REST API.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
import yaml

from crossdock.queue.states import JobState
from tests.conftest import TEST_CONFIG
from tests.integration.local.rest import ApiServer
from tests.integration.local.test_users import SECOND
from tests.integration.local.test_users_socket import as_second, cli_as_second, root_client, service  # noqa: F401
from tests.waiting import eventually as wait_until

pytestmark = [pytest.mark.security, pytest.mark.redis, pytest.mark.celery]

HTTP_GET = """
import http.client, json, socket, sys
class Conn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.connect(sys.argv[1])
out = {}
for path in sys.argv[2:]:
    c = Conn("crossdock")
    c.request("GET", path)
    r = c.getresponse()
    out[path] = [r.status, r.read().decode()]
print(json.dumps(out))
"""


def as_root(svc, *args, env=None, cwd=None) -> subprocess.CompletedProcess:
    """The CLI as root, through the socket (this test's own client environment) or ``env``."""
    return subprocess.run([sys.executable, "-m", "crossdock.cli.main", *args], env=env or dict(os.environ),
                          cwd=cwd or svc["home"], capture_output=True, text=True, timeout=120)


def secret_job(svc) -> tuple[int, str]:
    """Root's job: a script and an exported variable each holding a secret; run to its end."""
    secret = f"s3cr3t-{uuid.uuid4().hex}"
    script = svc["home"] / "deploy.sh"
    script.write_text(f"#!/bin/sh\n#SBATCH -J deploy\nDB_PASSWORD={secret} ./migrate\necho DB_PASSWORD={secret}\n")
    r = as_root(svc, "submit", "--parsable", f"--export=ALL,DB_PASSWORD={secret}",
                "-o", str(svc["home"] / "out-%j.txt"), str(script))
    assert r.returncode == 0, r.stderr
    job_id = int(r.stdout)
    gw = root_client().gateway
    wait_until("root's job to end", lambda: gw.job(job_id).state.terminal)
    assert secret in (svc["home"] / f"out-{job_id}.txt").read_text()  # world-readable: only the check protects it
    return job_id, secret


def service_runtime(svc):
    """A runtime on the service's own store and config (as `crossdock api` run as root beside it)."""
    from crossdock.runtime import Runtime

    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update({**{k: v for k, v in saved.items() if not k.startswith("CROSSDOCK_")},
                       **{k: v for k, v in svc["up_env"].items() if k.startswith("CROSSDOCK_")},
                       "CROSSDOCK_SOCKET": "none"})
    try:
        rt = Runtime.from_env(start_redis=False)
        rt.config
        return rt
    finally:
        os.environ.clear()
        os.environ.update(saved)


def rest_as_second(svc, paths: list[str]) -> dict[str, tuple[int, str]]:
    """GET each path of a REST API on the service's store, over its Unix socket, as the second user."""
    uds = svc["home"] / "api.sock"
    server = ApiServer(service_runtime(svc), uds=uds)
    try:
        r = as_second(svc, ["-c", HTTP_GET, str(uds), *paths])
        assert r.returncode == 0, r.stderr
        return {k: tuple(v) for k, v in json.loads(r.stdout).items()}
    finally:
        server.close()


def test_another_users_job_shows_its_state_never_its_script_command_env_or_output(service):
    job_id, secret = secret_job(service)
    shown = {args: cli_as_second(service, *args) for args in
             [("show", str(job_id)), ("show", str(job_id), "--json"), ("queue", "-t", "all", "--json"),
              ("queue", "-t", "all"), ("logs", str(job_id)), ("history", "-a", "-j", str(job_id)),
              ("history", "-a", "--json"), ("events",), ("events", "--job", str(job_id), "--json")]}
    for args, r in shown.items():
        assert secret not in r.stdout + r.stderr, (args, r.stdout)
        assert "Traceback" not in r.stdout + r.stderr, (args, r.stderr)
    seen = json.loads(shown[("show", str(job_id), "--json")].stdout)
    assert (seen["id"], seen["user"], seen["state"]) == (job_id, "root", JobState.COMPLETED.value), seen
    assert seen["cpus"] >= 1 and seen["name"] == "deploy" and "script" not in seen["spec"], seen
    assert [row["id"] for row in json.loads(shown[("queue", "-t", "all", "--json")].stdout)] == [job_id]
    refused = shown[("logs", str(job_id))]
    assert refused.returncode == 1 and len(refused.stderr.splitlines()) == 1, refused
    assert f"read the output of job {job_id}" in refused.stderr and "'root'" in refused.stderr
    # The owner sees all of it: the check above would have caught a leak.
    mine = as_root(service, "show", str(job_id), "--json")
    assert secret in mine.stdout and secret in as_root(service, "logs", str(job_id)).stdout

    got = rest_as_second(service, [f"/v1/jobs/{job_id}", "/v1/jobs?which=all", f"/v1/jobs/{job_id}/logs",
                                   f"/v1/jobs/{job_id}/events", "/v1/events", "/v1/history", "/v1/overview"])
    for path, (status, body) in got.items():
        assert secret not in body, (path, body)
    status, body = got[f"/v1/jobs/{job_id}"]
    [job] = json.loads(body)
    assert status == 200 and (job["spec"]["user"], job["state"]) == ("root", "COMPLETED"), job
    assert job["spec"]["command"] is None and job["spec"]["script"] is None and job["spec"]["env"] == {}
    assert job["spec"]["cpus_per_task"] >= 1 and job["spec"]["stdout"] is None
    assert got[f"/v1/jobs/{job_id}/logs"][0] == 403


def reconfigure(svc, **changes) -> None:
    """The service's config file with ``changes``; ``up`` reloads it on change."""
    svc["config"].write_text(yaml.safe_dump({**TEST_CONFIG, "admins": [], **changes}))


def seen_script(svc, job_id: int) -> str:
    r = cli_as_second(svc, "show", str(job_id), "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)["spec"].get("script") or ""


def test_an_admin_sees_all_and_the_config_opens_more(service):
    job_id, secret = secret_job(service)
    assert secret not in seen_script(service, job_id)
    reconfigure(service, admins=[SECOND])
    wait_until("the second user made an admin", lambda: secret in seen_script(service, job_id))
    assert secret in cli_as_second(service, "logs", str(job_id)).stdout
    reconfigure(service, private_data=[])  # not an admin again, but scripts and output are open
    wait_until("scripts opened to everyone", lambda: cli_as_second(service, "show", str(job_id), "--json").stdout
               .count(secret) == 2)  # the script's two lines; never the exported value
    r = cli_as_second(service, "show", str(job_id), "--json")
    assert "env" not in json.loads(r.stdout)["spec"], r.stdout
    assert secret in cli_as_second(service, "logs", str(job_id)).stdout  # the file's own mode decides now
    assert cli_as_second(service, "events", "--job", str(job_id), "--json").stdout.strip()  # open: its events
    reconfigure(service, private_data=["jobs", "usage", "events"])
    wait_until("events closed", lambda: cli_as_second(service, "events", "--job", str(job_id), "--json")
               .stdout.strip() == "")
    assert secret not in seen_script(service, job_id)


def test_tokens_need_an_account_and_revocation_takes_effect_on_the_next_request(service):
    root = {**service["up_env"]}
    for user, extra in (("nobody-" + uuid.uuid4().hex[:6], ()), ("ghost-admin", ("--admin",))):
        r = as_root(service, "tokens", "create", user, *extra, env=root)
        assert r.returncode == 2 and len(r.stderr.splitlines()) == 1, r
        assert f"{user!r} has no account on this machine" in r.stderr and "Traceback" not in r.stderr
    listed = as_root(service, "tokens", "list", "--json", env=root)
    assert json.loads(listed.stdout) == [], listed
    made = json.loads(as_root(service, "tokens", "create", SECOND, "--json", env=root).stdout)
    import httpx

    server = ApiServer(service_runtime(service))
    try:
        with httpx.Client(base_url=server.url, timeout=30) as client:
            headers = {"Authorization": f"Bearer {made['token']}"}
            assert client.get("/v1/whoami", headers=headers).json()["user"] == SECOND
            assert as_root(service, "tokens", "revoke", made["id"], env=root).returncode == 0
            after = client.get("/v1/whoami", headers=headers)
            assert after.status_code == 401 and "unknown or revoked" in after.json()["problems"][0], after.text
    finally:
        server.close()


COMMANDS = [["queue"], ["queue", "--json"], ["show", "1"], ["priority"], ["history"], ["cancel", "1"],
            ["hold", "1"], ["release", "1"], ["requeue", "1"], ["logs", "1"], ["wait", "1", "--timeout", "1"],
            ["info"], ["health"], ["health", "--json"], ["autoscale"], ["autoscale", "--json"], ["deschedule"],
            ["deschedule", "--dry-run"], ["issue-key", SECOND], ["events"], ["config", "show"],
            ["config", "apply", "/etc/hostname"], ["services", "list"], ["services", "show", "x"],
            ["services", "scale", "x", "2"], ["services", "delete", "x"], ["serve", "x", "--command", "true"],
            ["tokens", "list"], ["tokens", "create", "bob"], ["tokens", "revoke", "abc"]]


def test_every_command_of_a_user_answers_without_a_traceback_or_a_redis_of_its_own(service):
    home = service["home"] / "t2-home"
    home.mkdir()
    os.chown(home, service["uid"], service["gid"])
    for args in COMMANDS:
        r = as_second(service, ["-m", "crossdock.cli.main", *args], extra={"HOME": str(home)})
        assert "Traceback" not in r.stdout + r.stderr, (args, r.stderr)
        assert r.returncode == 0 or len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
        assert not [p for p in Path(home).rglob("*") if "redis" in p.name], (args, list(Path(home).rglob("*")))
    health = json.loads(as_second(service, ["-m", "crossdock.cli.main", "health", "--json"]).stdout)
    parts = {p["name"]: p for p in health["parts"]}
    assert health["status"] != "down" and parts["socket"]["ok"], health
    store_only = as_second(service, ["-m", "crossdock.cli.main", "tokens", "list"])
    assert store_only.returncode == 2 and "crossdock tokens list: needs the service's store" in store_only.stderr
    # Services and the config go through the socket: the service's real world, its admin checks.
    listed = as_second(service, ["-m", "crossdock.cli.main", "services", "list", "--json"])
    assert listed.returncode == 0, listed
    assert [(s["name"], s["owner"]) for s in json.loads(listed.stdout)] == [("x", SECOND)]  # `serve x` above
    shown = as_second(service, ["-m", "crossdock.cli.main", "config", "show"])
    assert shown.returncode == 0 and "default_queue: preprocessing" in shown.stdout, shown
    assert str(service["config"]) in shown.stderr  # the service's file, not a private default
    applied = as_second(service, ["-m", "crossdock.cli.main", "config", "apply", str(service["config"])])
    assert applied.returncode == 1 and f"config apply: {SECOND} is not an admin" in applied.stderr, applied
