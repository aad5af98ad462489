"""sbatch's file name patterns name crossdock's ids on every backend: the local supervisor's
expansion and the ``--output``/``--error`` the Slurm backend hands to sbatch."""

from __future__ import annotations

import pytest

from crossdock.backends.slurm.request import array_file_patterns, build_request, groupable
from crossdock.queue import filenames
from crossdock.queue.models import ArraySpec, Job, JobSpec


def _job(job_id=16, array_job_id=None, task=None, **spec) -> Job:
    spec.setdefault("command", ["true"])
    spec.setdefault("workdir", "/w")
    spec.setdefault("name", "train")
    if task is not None:
        spec.setdefault("array", ArraySpec(task_ids=[0, 2, 5]))
    return Job(id=job_id, spec=JobSpec(**spec), array_job_id=array_job_id, array_task_id=task)


@pytest.mark.parametrize("job,local,slurm", [
    pytest.param(_job(), "/w/slurm-16.out", "slurm-16.out", id="default"),
    pytest.param(_job(stdout="%x-%j.out"), "/w/train-16.out", "%x-16.out", id="name-and-id"),
    pytest.param(_job(stdout="%J.%5j.%A"), "/w/16.00016.16", "16.00016.16", id="J-width-A"),
    pytest.param(_job(stdout="100%%j-%N.log"), "/w/100%j-node1.log", "100%%j-%N.log", id="percent-kept"),
    pytest.param(_job(stdout="%a.out"), "/w/4294967294.out", "%a.out", id="a-outside-array"),
    pytest.param(_job(20, 18, 5), "/w/slurm-18_5.out", "slurm-18_5.out", id="task-default"),
    pytest.param(_job(20, 18, 5, stdout="%A_%3a-%j.out"), "/w/18_005-20.out", "18_005-20.out", id="task-own-id"),
])
def test_one_id_on_every_backend(job, local, slurm):
    out, err = filenames.output_files(job, "node1.site", "/elsewhere")
    assert (str(out), str(err)) == (local, local)
    req = build_request(job)
    assert (req.stdout, req.stderr) == (slurm, None)


def test_error_pattern_expands_like_output():
    job = _job(stdout="o-%j", stderr="e-%j-%u")
    assert [str(p) for p in filenames.output_files(job, "n", "/x")] == ["/w/o-16", "/w/e-16-nobody"]
    assert (build_request(job).stdout, build_request(job).stderr) == ("o-16", "e-16-%u")


@pytest.mark.parametrize("stdout,stderr,grouped,patterns", [
    pytest.param(None, None, True, ("slurm-18_%a.out", None), id="default"),
    pytest.param("%x_%A_%4a.out", "%A.err", True, ("%x_18_%4a.out", "18.err"), id="array-codes"),
    pytest.param("%x-%j.out", None, False, ("%x-%j.out", None), id="own-id"),
    pytest.param(None, "e-%J", False, ("slurm-18_%a.out", "e-%J"), id="own-id-in-error"),
    pytest.param("x%%j", None, True, ("x%%j", None), id="percent-j-is-text"),
])
def test_a_slurm_array_names_crossdocks_array_id(stdout, stderr, grouped, patterns):
    spec = _job(stdout=stdout, stderr=stderr, task=0).spec
    assert groupable(spec) is grouped
    if grouped:
        assert array_file_patterns(spec, 18) == patterns


def test_an_array_whose_files_name_each_task_goes_out_task_by_task_throttled_by_chaining():
    from crossdock.backends.slurm import SlurmBackend
    from tests.unit.test_slurm_translate import MemoryDriver

    driver = MemoryDriver()
    spec = JobSpec(command=["true"], workdir="/w", stdout="%x-%j.out", array=ArraySpec(task_ids=[0, 1, 2], max_running=2))
    tasks = [Job(id=30 + t, spec=spec, array_job_id=30, array_task_id=t) for t in (0, 1, 2)]
    assert SlurmBackend(driver).submit_array(tasks) == {30: "101", 31: "102", 32: "103"}
    assert [(r.stdout, r.array, r.dependency, r.env["CROSSDOCK_JOB_ID"]) for r in driver.submitted] == [
        ("%x-30.out", None, None, "30"), ("%x-31.out", None, None, "31"), ("%x-32.out", None, "afterany:101", "32")]
