"""An upgrade from the previous release, as an operator does it: crossdock 0.1.0's ``up`` runs jobs
on its state directory (and the embedded Redis it starts there), is stopped with SIGTERM while one
job runs, one is held and others wait on a dependency; this release's ``up`` starts on the same
state and Redis. Every job ends once, in its true state, and the faces show the old jobs.

The release is unpacked from this repository's history (``git archive`` of its commit, tagged
``v0.1.0``: the commit, not the tag, so that a clone without tags runs it) and run with this
environment's interpreter, its own tree first on the path."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from crossdock.backends.redis_store import embedded
from crossdock.backends.redis_store.upgrade import FORMAT, SEALED_ON_UPGRADE
from crossdock.queue.states import JobState
from tests.integration.local.test_up import Up, client_runtime, up_env  # noqa: F401
from tests.waiting import eventually

pytestmark = [pytest.mark.upgrade, pytest.mark.redis, pytest.mark.celery]

RELEASE = "b8e00675bbfa1803ef90947505ab7ab93e7eabc0"
"""crossdock 0.1.0 (tag ``v0.1.0``): the last release before job specs were sealed."""
REPO = Path(__file__).resolve().parents[3]

OLD_SUBMIT = """
import json, sys
from crossdock.client import Client
from crossdock.queue.models import JobSpec
from crossdock.runtime import Runtime

work = sys.argv[1]
def afterok(job):
    return {"deps": [{"type": "afterok", "job_id": job.id}]}
client = Client(Runtime.from_env())
wait, = client.submit_specs([JobSpec(name="waits", workdir=work, stdout=work + "/waits.log", command=[
    "sh", "-c", "while [ ! -e go ]; do sleep 0.1; done; echo ran >> waits.out"])])
held, after = client.submit_specs([
    JobSpec(name="held", workdir=work, stdout=work + "/held.log", hold=True, env={"GREETING": "hello"},
            command=["sh", "-c", 'echo "$GREETING" >> held.out']),
    JobSpec(name="after", workdir=work, stdout=work + "/after.log", dependency=afterok(wait),
            command=["sh", "-c", "echo ran >> after.out"]),
])
py = client.options(dependency=afterok(wait)).submit(pow, 2, 10)
print(json.dumps({"waits": wait.id, "held": held.id, "after": after.id, "python": py.id}))
"""


@pytest.fixture(scope="module")
def old_release(tmp_path_factory) -> Iterator[Path]:
    """The previous release's ``crossdock`` package, unpacked."""
    out = subprocess.run(["git", "-C", str(REPO), "archive", "--format=tar", RELEASE, "crossdock"],
                         capture_output=True, timeout=120)
    assert out.returncode == 0, (f"crossdock 0.1.0 ({RELEASE[:7]}, tag v0.1.0) is not in {REPO}'s history:"
                                 f" {out.stderr.decode().strip()}; the upgrade test needs a full clone"
                                 " (git fetch --unshallow)")
    tag = subprocess.run(["git", "-C", str(REPO), "rev-parse", "--verify", "-q", "v0.1.0^{commit}"],
                         capture_output=True, text=True, timeout=60)
    assert tag.returncode != 0 or tag.stdout.strip() == RELEASE, f"tag v0.1.0 is {tag.stdout.strip()}, not {RELEASE}"
    tree = tmp_path_factory.mktemp("crossdock-0.1.0")
    with tarfile.open(fileobj=io.BytesIO(out.stdout)) as tar:
        tar.extractall(tree, filter="data")
    yield tree
    stop_strays(tree)


def old_env(env: dict[str, str], tree: Path) -> dict[str, str]:
    return {**env, "PYTHONPATH": str(tree)}


def stop_strays(tree: Path) -> None:
    """Stop what 0.1.0's ``up`` left running from its tree (its service router outlives a SIGTERM
    and starts the embedded Redis again each minute)."""
    for proc in Path("/proc").iterdir():
        try:
            here = os.readlink(proc / "cwd").removesuffix(" (deleted)")
        except (OSError, ValueError):
            continue
        if proc.name.isdigit() and Path(here) == tree:
            try:
                os.kill(int(proc.name), signal.SIGKILL)
            except ProcessLookupError:
                pass


def cli(env: dict[str, str], *args: str, cwd: Path | None = None) -> str:
    out = subprocess.run([sys.executable, "-m", "crossdock", *args], env=env, capture_output=True, text=True,
                         timeout=60, cwd=cwd)
    assert out.returncode == 0, (args, out.stdout, out.stderr)
    return out.stdout


def test_jobs_of_the_previous_release_run_once_after_the_upgrade(old_release, up_env, tmp_path, monkeypatch):
    state, env = up_env
    work = tmp_path / "work"
    work.mkdir()
    old = old_env(env, old_release)
    up = Up(state, old, tmp_path / "up-0.1.0.log", cwd=old_release)  # its cwd: its tree first on the path
    submitted = subprocess.run([sys.executable, "-c", OLD_SUBMIT, str(work)], env=old, cwd=old_release,
                               capture_output=True, text=True, timeout=60)
    assert submitted.returncode == 0, submitted.stderr
    ids = json.loads(submitted.stdout)
    rt = client_runtime(state, env, monkeypatch)
    eventually("0.1.0 to run the waiting job", lambda: rt.store.get(ids["waits"]).state is JobState.RUNNING, 60)
    up.stop()
    assert embedded.pid(state) is not None  # kept: a placed job reports its end to it

    new = Up(state, env, tmp_path / "up-new.log")
    try:
        log = eventually("the new up to bring the store to its format",
                         lambda: "sealed 4 job specs" in (text := (tmp_path / "up-new.log").read_text()) and text, 60)
        assert "format 2" in log
        assert rt.store.r.get(rt.store.k.store_format) == str(FORMAT)
        cli(env, "release", str(ids["held"]))
        (work / "go").touch()
        ends = {name: eventually(f"job {name} to end", lambda i=i: (j := rt.store.get(i)).state.terminal and j, 90)
                for name, i in ids.items()}
        assert {name: j.state for name, j in ends.items()} == dict.fromkeys(ids, JobState.COMPLETED), \
            {name: j.reason for name, j in ends.items()}
        assert (work / "waits.out").read_text() == "ran\n"
        assert (work / "held.out").read_text() == "hello\n"  # its environment, sealed at the upgrade, opened
        assert (work / "after.out").read_text() == "ran\n"
        from crossdock import Client

        assert Client(rt).job(ids["python"]).result(timeout=30) == 1024
        for name, i in ids.items():
            events = rt.store.events(i)
            assert [e.get("event") for e in events].count(SEALED_ON_UPGRADE) == 1, (name, events)
            assert [e.get("to") for e in events].count("COMPLETED") == 1, (name, events)

        shown = json.loads(cli(env, "show", str(ids["held"]), "--json"))
        assert shown["state"] == "COMPLETED" and shown["name"] == "held", shown
        queued = json.loads(cli(env, "queue", "-t", "all", "--json"))
        assert {j["id"] for j in queued} >= set(ids.values()), queued
        history = cli(env, "history", "-a", "-j", ",".join(str(i) for i in ids.values()), "--json")
        assert {j["id"] for j in json.loads(history)} == set(ids.values()), history
        events = cli(env, "events", "--job", str(ids["held"]))
        assert SEALED_ON_UPGRADE in events, events
    finally:
        new.stop()
        stop_strays(old_release)


def test_an_unsealed_spec_written_after_the_upgrade_is_refused(old_release, up_env, tmp_path, monkeypatch):
    """Once the store has its format, a spec written into Redis unsealed is refused, as in a new store."""
    state, env = up_env
    work = tmp_path / "work"
    work.mkdir()
    new = Up(state, env, tmp_path / "up.log")
    try:
        rt = client_runtime(state, env, monkeypatch)
        eventually("the format key", lambda: rt.store.r.get(rt.store.k.store_format) == str(FORMAT), 60)
        from crossdock import service
        from crossdock.queue.models import JobSpec

        [job] = service.submit(rt, [JobSpec(command=["true"], workdir=str(work), stdout="/dev/null", hold=True)])
        key = rt.store.k.job(job.id)
        spec = json.loads(rt.store.r.hget(key, "spec"))
        spec["command"] = ["sh", "-c", f"echo ran > {work}/planted"]
        rt.store.r.hdel(key, "seal")
        rt.store.r.hset(key, "spec", json.dumps(spec))
        cli(env, "release", str(job.id))
        done = eventually("the planted job to end", lambda: (j := rt.store.get(job.id)).state.terminal and j, 90)
        assert done.state is JobState.FAILED and done.reason.startswith("BadSeal: the spec of job"), done
        assert "unsealed" in done.reason and not (work / "planted").exists()
    finally:
        new.stop()


def test_a_store_of_a_newer_format_is_refused(up_env, tmp_path, monkeypatch):
    state, env = up_env
    embedded.ensure_running(state)
    rt = client_runtime(state, env, monkeypatch)
    rt.store.r.set(rt.store.k.store_format, FORMAT + 1)
    out = subprocess.run([sys.executable, "-m", "crossdock", "up"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 1 and f"format {FORMAT + 1}, written by a newer crossdock" in out.stderr, out
    assert "Traceback" not in out.stderr
