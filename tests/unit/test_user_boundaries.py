"""Between users, without services: the secret deny-list, the job's environment, seals, and the
one ownership check (crossdock.service) over a stand-in store."""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest

from crossdock import service, settings, signing
from crossdock.backends.local.environment import job_environment
from crossdock.queue.environ import exportable
from crossdock.queue.errors import BadSignature, PermissionDenied
from crossdock.queue.models import Job, JobSpec


@pytest.mark.parametrize("name", ["CROSSDOCK_REDIS_URL", "CROSSDOCK_SIGNING_KEY", "CROSSDOCK_API_TOKEN",
                                  "CROSSDOCK_REDIS_PASSWORD", "REDIS_PASSWORD", "REDIS_URL", "REDISCLI_AUTH",
                                  "SLURM_JWT", "SLURM_LOCAL_JWT"])
def test_crossdocks_secrets_never_travel(name):
    assert exportable({name: "s3cret", "HOME": "/home/a"}) == {"HOME": "/home/a"}


def test_ordinary_variables_and_a_users_own_kubeconfig_travel():
    env = {"CROSSDOCK_PREFIX": "cd", "SLURM_CONF": "/etc/slurm.conf", "KUBECONFIG": "/home/a/.kube/config",
           "REDIS_HOST_LABEL": "x"}
    assert exportable(env, {"KUBECONFIG": "/root/.kube/service"}) == env
    assert "KUBECONFIG" not in exportable(env, {"KUBECONFIG": "/home/a/.kube/config"})


def test_the_job_gets_the_stored_environment_never_the_services(monkeypatch):
    monkeypatch.setenv("SERVICE_ONLY", "1")
    monkeypatch.setenv("CROSSDOCK_REDIS_URL", "redis://:pw@host")
    job = Job(id=7, spec=JobSpec(command=["env"], user="alice", env={"MINE": "yes", "CROSSDOCK_REDIS_URL": "x"}))
    env = job_environment(job, "n1", home="/home/alice")
    assert env["MINE"] == "yes" and "SERVICE_ONLY" not in env and "CROSSDOCK_REDIS_URL" not in env
    assert (env["USER"], env["HOME"], env["SLURM_JOB_ID"]) == ("alice", "/home/alice", "7")
    assert env["PATH"]


def test_a_seal_opens_only_with_its_key_and_context(tmp_path):
    master = signing.master_key(tmp_path / "state")
    assert (tmp_path / "state" / signing.KEY_FILE).stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "state").stat().st_mode & 0o777 == 0o700
    assert signing.master_key(tmp_path / "state") == master  # created once
    alice, bob = signing.derive(master, "alice"), signing.derive(master, "bob")
    blob = signing.seal(alice, "result:1", b"data")
    assert signing.unseal(alice, "result:1", blob, "r") == b"data"
    for key, context, data in ((bob, "result:1", blob), (alice, "result:2", blob), (alice, "result:1", b"data"),
                               (alice, "result:1", blob[:-1] + b"X")):
        with pytest.raises(BadSignature):
            signing.unseal(key, context, data, "r")
    sig = signing.sign_text(alice, "payload", "abc")
    signing.check_text(alice, "payload", "abc", sig, "p")
    for key, text, s in ((bob, "abc", sig), (alice, "abd", sig), (alice, "abc", ""), (alice, "abc", "zz")):
        with pytest.raises(BadSignature):
            signing.check_text(key, "payload", text, s, "p")


class _Store:
    def __init__(self):
        self.refusals = []

    def record_refusal(self, job_id, actor, action):
        self.refusals.append((job_id, actor, action))


def _rt(admins=()):
    return SimpleNamespace(store=_Store(), config=SimpleNamespace(admins=list(admins)))


def test_only_the_owner_or_an_admin_may_act():
    rt = _rt()
    mine, theirs = Job(id=1, spec=JobSpec(user="alice")), Job(id=2, spec=JobSpec(user="bob"))
    service.authorize(rt, service.Caller("alice", False), [mine], "cancel")
    service.authorize(rt, service.Caller("carol", True), [mine, theirs], "cancel")
    with pytest.raises(PermissionDenied, match="cancel job 2: it belongs to 'bob' and you are 'alice'"):
        service.authorize(rt, service.Caller("alice", False), [mine, theirs], "cancel")
    assert rt.store.refusals == [(2, "alice", "cancel")]


def test_user_is_accepted_only_as_oneself_unless_admin(monkeypatch):
    from crossdock import settings

    names = {os.getuid(): "alice", 4242: "bob"}
    monkeypatch.setattr(service, "user_name", names.__getitem__)
    monkeypatch.setenv("LOGNAME", "bob")
    monkeypatch.setattr(service, "is_admin", lambda admins, uid: names[uid] in admins)
    assert service.caller(_rt()) == service.Caller("alice", False)
    # a socket's peer: its uid, whatever this process is
    assert service.caller(_rt(), uid=4242) == service.Caller("bob", False)
    with pytest.raises(PermissionDenied, match="user='alice': you are 'bob'"):
        service.caller(_rt(), "alice", uid=4242)
    assert service.caller(_rt(), "alice") == service.Caller("alice", False)
    with pytest.raises(PermissionDenied, match="user='bob': you are 'alice'"):
        service.caller(_rt(), "bob")
    assert service.caller(_rt(admins=["alice"]), "bob") == service.Caller("bob", True)
    assert settings.current_user() != "bob"  # the uid's name, not LOGNAME
    assert settings.current_user() == (__import__("pwd").getpwuid(os.getuid()).pw_name)


def test_dispatch_fails_a_python_job_whose_payload_its_owner_did_not_seal(tmp_path):
    """Before any backend sees it: a Slurm or Kubernetes node would unpickle it unchecked."""
    from crossdock.queue.models import PythonCall
    from crossdock.workers import tasks

    failed = []
    store = SimpleNamespace(transition=lambda i, state, **kw: failed.append((i, state.value, kw["reason"])))
    rt = SimpleNamespace(settings=SimpleNamespace(state_dir=tmp_path), store=store)
    key = signing.user_key(tmp_path, "alice")
    good = Job(id=1, attempts=1, spec=JobSpec(user="alice", python=PythonCall(
        payload="eA==", signature=signing.sign_text(key, "payload", "eA=="))))
    stolen = Job(id=2, attempts=1, spec=JobSpec(user="bob", python=good.spec.python))  # alice's seal on bob's job
    plain = Job(id=3, attempts=1, spec=JobSpec(user="bob", command=["true"]))
    rewritten = Job(id=4, attempts=1, spec=JobSpec(user="root", command=["true"]))
    kept = tasks._sealed(rt, [good, stolen, plain, rewritten], {4: "the spec of job 4 does not match its seal"})
    assert [j.id for j in kept] == [1, 3]
    assert [(i, s) for i, s, _ in failed] == [(2, "FAILED"), (4, "FAILED")] and "BadSignature" in failed[0][2]
    assert failed[1][2] == "BadSeal: the spec of job 4 does not match its seal"


def test_per_user_slurm_tokens_are_issued_once_and_sent_for_other_owners_only(tmp_path, monkeypatch):
    from crossdock.backends.slurm.driver import SubmitRejected
    from crossdock.backends.slurm.rest import RestDriver, UserTokens

    calls = tmp_path / "calls"
    fake = tmp_path / "scontrol"
    fake.write_text(f'#!/bin/sh\necho "$@" >> {calls}\necho "SLURM_JWT=tok-$2"\n')
    fake.chmod(0o755)
    tokens = UserTokens({"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert tokens("root") == tokens("root") == "tok-username=root"
    assert calls.read_text().splitlines() == ["token username=root lifespan=3600"]
    driver = RestDriver(url="http://127.0.0.1:1", token="svc", user="svc", tokens=tokens)
    assert driver._owner_headers("svc") is None and driver._owner_headers("") is None
    assert driver._owner_headers("root")["X-SLURM-USER-TOKEN"] == "tok-username=root"
    with pytest.raises(SubmitRejected, match="no passwd entry"):
        driver._owner_headers("no-such-user-x")


def test_a_result_is_unpickled_only_in_its_owners_process(monkeypatch):
    """An admin's process (another uid) refuses before anything is fetched; its owner's reads."""
    from crossdock.handles import ForeignResult, refuse_foreign

    me = settings.current_user()
    refuse_foreign(Job(id=5, spec=JobSpec(user=me, command=["true"])))
    theirs = Job(id=5, spec=JobSpec(user="nobody-here-4242", command=["true"]))
    with pytest.raises(ForeignResult, match=rf"^the result of job 5 belongs to 'nobody-here-4242' and this process runs"
                                            rf" as '{me}'.*sudo -u nobody-here-4242 python"):
        refuse_foreign(theirs)
    monkeypatch.setattr("crossdock.handles.os.geteuid", lambda: 4243)  # a setuid process: the effective uid counts
    with pytest.raises(ForeignResult):
        refuse_foreign(Job(id=5, spec=JobSpec(user=me, command=["true"])))
