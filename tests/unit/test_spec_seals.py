"""Job specs sealed and environments encrypted in the job hash (backends/redis_store/sealing.py)."""

from __future__ import annotations

import json

import pytest

from crossdock.backends.redis_store.codec import job_to_hash
from crossdock.backends.redis_store.sealing import ENV, SEAL, SpecSeals
from crossdock.queue.errors import CrossdockError
from crossdock.queue.models import Job, JobSpec

KEYS = {"root": b"r" * 32, "alice": b"a" * 32}


def _key(user: str) -> bytes:
    if user not in KEYS:
        raise CrossdockError(f"no key for {user}")
    return KEYS[user]


def stored(job: Job, seals: SpecSeals) -> dict[str, str]:
    return {**job_to_hash(job), **seals.fields(job)}


def root_job(job_id: int = 7, **fields) -> Job:
    return Job(id=job_id, spec=JobSpec(user="root", command=["true"], env={"MY_TOKEN": "s3cr3t"}, **fields))


def test_a_stored_spec_opens_and_verifies_with_its_owners_key_and_keeps_its_environment_out_of_clear():
    seals = SpecSeals(_key)
    h = stored(root_job(), seals)
    assert "s3cr3t" not in json.dumps(h) and "MY_TOKEN" not in json.dumps(h)
    assert seals.refusal(7, h, "root") == ""
    assert seals.spec(h["spec"], 7, h[ENV]).env == {"MY_TOKEN": "s3cr3t"}


def test_hold_and_release_keep_the_seal():
    seals = SpecSeals(_key)
    h = stored(root_job(hold=True), seals)
    spec = json.loads(h["spec"])
    spec.pop("hold")
    released = {**h, "spec": json.dumps(spec, separators=(",", ":"), ensure_ascii=False)}
    assert seals.refusal(7, released, "root") == ""


@pytest.mark.parametrize("change", [
    pytest.param(lambda h: {**h, "spec": h["spec"].replace('["true"]', '["sh","-c","id"]')}, id="command"),
    pytest.param(lambda h: {k: v for k, v in h.items() if k != SEAL}, id="unsealed"),
    pytest.param(lambda h: {k: v for k, v in h.items() if k != ENV}, id="environment dropped"),
    pytest.param(lambda h: {**h, ENV: stored(root_job(8), SpecSeals(_key))[ENV]}, id="another job's environment"),
    pytest.param(lambda h: {**h, SEAL: SpecSeals(_key).fields(Job(id=7, spec=JobSpec(
        user="alice", command=["true"])))[SEAL]}, id="alice's seal"),
])
def test_a_changed_spec_is_refused(change):
    seals = SpecSeals(_key)
    h = change(stored(root_job(), seals))
    assert "refusing to run it" in seals.refusal(7, h, "root")


def test_no_key_for_the_owner_opens_nothing_and_verifies_nothing():
    h = stored(root_job(), SpecSeals(_key))
    stranger = SpecSeals(lambda user: _key("mallory"))
    assert stranger.spec(h["spec"], 7, h[ENV]).env == {}
    assert "no key here" in stranger.refusal(7, h, "root")
    assert SpecSeals(lambda user: b"x" * 32).spec(h["spec"], 7, h[ENV]).env == {}  # a wrong key opens nothing
    with pytest.raises(CrossdockError):
        stranger.fields(root_job())  # no key: no submit
