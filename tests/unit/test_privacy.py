"""What one user sees of another's work (``crossdock.queue.privacy``, after Slurm's PrivateData):
the owner and admins see all; anyone else a job's existence, state, user and resources, never its
environment or Python call, and under ``jobs`` (the default) never its script, command or output."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from crossdock.queue import privacy
from crossdock.queue.config import DEFAULT_PRIVATE_DATA
from crossdock.queue.models import Job, JobSpec, PythonCall

SECRET = "DB_PASSWORD=hunter2"


def _job(**spec) -> Job:
    return Job(id=7, spec=JobSpec(user="alice", env={"DB_PASSWORD": "hunter2"}, export=f"ALL,{SECRET}",
                                  workdir="/home/alice", stdout="/home/alice/out.txt", cpus_per_task=4, **spec),
               attempts=2, submit_time=datetime(2026, 1, 2, tzinfo=timezone.utc), nodes=["n1"])


JOBS = [_job(command=["sh", "-c", f"{SECRET} ./migrate"]), _job(script=f"#!/bin/sh\n{SECRET} ./migrate\n"),
        _job(python=PythonCall(payload="eA==", signature="ab", qualname="train", parts="p:7"))]
IDS = ["command", "script", "python"]


@pytest.mark.parametrize("job", JOBS, ids=IDS)
@pytest.mark.parametrize("viewer, admin", [("alice", False), ("root", True)], ids=["owner", "admin"])
def test_the_owner_and_admins_see_all(job, viewer, admin):
    assert privacy.visible(job, viewer, admin, DEFAULT_PRIVATE_DATA) is job


@pytest.mark.parametrize("job", JOBS, ids=IDS)
def test_another_user_sees_state_user_and_resources_never_the_contents(job):
    seen = privacy.visible(job, "bob", False, DEFAULT_PRIVATE_DATA)
    assert SECRET not in seen.model_dump_json() and "hunter2" not in seen.model_dump_json()
    assert (seen.id, seen.state, seen.spec.user, seen.spec.cpus_per_task, seen.nodes) == (7, job.state, "alice", 4, ["n1"])
    assert seen.spec.display_name() == job.spec.display_name()  # the name squeue shows stays
    assert seen.spec.export == "ALL,DB_PASSWORD" and seen.spec.stdout is None and seen.spec.workdir is None
    assert job.spec.env == {"DB_PASSWORD": "hunter2"}  # the stored job is untouched


@pytest.mark.parametrize("job", JOBS, ids=IDS)
def test_opening_jobs_shows_the_script_and_command_never_the_environment_or_payload(job):
    seen = privacy.visible(job, "bob", False, [])
    assert (seen.spec.command, seen.spec.script, seen.spec.stdout) == (job.spec.command, job.spec.script, job.spec.stdout)
    assert seen.spec.env == {} and "hunter2" not in seen.spec.export
    if job.spec.python is not None:
        assert (seen.spec.python.payload, seen.spec.python.signature, seen.spec.python.parts) == ("", "", "")


@pytest.mark.parametrize("private, viewer, admin, keys", [
    (["usage"], "bob", False, {"q", "q/bob"}),
    (["usage"], "root", True, {"q", "q/bob", "q/alice"}),
    ([], "bob", False, {"q", "q/bob", "q/alice"}),
], ids=["private", "admin", "open"])
def test_usage_of_others_is_hidden_under_usage(private, viewer, admin, keys):
    usage = {"q": 3.0, "q/bob": 1.0, "q/alice": 2.0}
    assert set(privacy.visible_usage(usage, viewer, admin, private)) == keys


def test_a_history_record_of_another_loses_its_working_directory():
    record = {"id": 7, "user": "alice", "state": "COMPLETED", "workdir": "/home/alice/secret-project"}
    assert "workdir" not in privacy.visible_record(record, "bob", False, ["jobs"])
    assert privacy.visible_record(record, "alice", False, ["jobs"]) == record
    assert privacy.visible_record(record, "bob", False, []) == record


def test_private_data_names_only_what_it_knows():
    from pydantic import ValidationError

    from crossdock.queue.config import ClusterConfig
    from tests.conftest import TEST_CONFIG

    assert ClusterConfig.model_validate(TEST_CONFIG).private_data == ["jobs"]
    with pytest.raises(ValidationError) as err:
        ClusterConfig.model_validate({**TEST_CONFIG, "private_data": ["scripts"]})
    assert "private_data" in str(err.value) and "'jobs', 'usage' or 'events'" in str(err.value), err.value
