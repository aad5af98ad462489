"""sbatch's placement, timing, signal, license and per-GPU options, and problems reported all at once."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from crossdock.queue.errors import InvalidOption, InvalidOptions
from crossdock.queue.models import KillSignal
from crossdock.queue.sbatch import build_spec
from crossdock.queue.sbatch_extras import constraint_terms, parse_begin, parse_licenses, parse_signal

NOW = datetime(2026, 3, 10, 14, 30, 15, 123, tzinfo=timezone.utc)
SH = "#!/bin/sh\n"


def spec(*argv, script=None):
    if script is None:
        return build_spec([*argv, "--wrap", "true"], now=NOW)
    return build_spec(list(argv), SH + script, "job.sh", now=NOW)


def at(*args):
    return datetime(*args, tzinfo=timezone.utc)


@pytest.mark.parametrize("value,expected", [
    pytest.param("now", at(2026, 3, 10, 14, 30, 15), id="now"),
    pytest.param("now+1hour", at(2026, 3, 10, 15, 30, 15), id="now+hour"),
    pytest.param("now+90", at(2026, 3, 10, 14, 31, 45), id="now+seconds-default"),
    pytest.param("now+2days", at(2026, 3, 12, 14, 30, 15), id="now+days"),
    pytest.param("now+1w", at(2026, 3, 17, 14, 30, 15), id="now+week-short"),
    pytest.param("16:00", at(2026, 3, 10, 16, 0, 0), id="clock-later-today"),
    pytest.param("10:00", at(2026, 3, 11, 10, 0, 0), id="clock-past-is-tomorrow"),
    pytest.param("4:15pm", at(2026, 3, 10, 16, 15, 0), id="clock-pm"),
    pytest.param("16:00:30", at(2026, 3, 10, 16, 0, 30), id="clock-seconds"),
    pytest.param("2026-04-01", at(2026, 4, 1, 0, 0, 0), id="iso-date"),
    pytest.param("2026-04-01T08:05", at(2026, 4, 1, 8, 5, 0), id="iso-minutes"),
    pytest.param("2026-04-01T08:05:09", at(2026, 4, 1, 8, 5, 9), id="iso-seconds"),
    pytest.param("midnight", at(2026, 3, 11, 0, 0, 0), id="midnight"),
    pytest.param("noon", at(2026, 3, 11, 12, 0, 0), id="noon-past"),
    pytest.param("teatime", at(2026, 3, 10, 16, 0, 0), id="teatime"),
    pytest.param("fika", at(2026, 3, 10, 15, 0, 0), id="fika"),
    pytest.param("today", at(2026, 3, 10, 0, 0, 0), id="today"),
    pytest.param("tomorrow", at(2026, 3, 11, 0, 0, 0), id="tomorrow"),
    pytest.param("0401", at(2026, 4, 1, 0, 0, 0), id="mmdd"),
    pytest.param("04/01/27", at(2027, 4, 1, 0, 0, 0), id="mm/dd/yy"),
    pytest.param("0301", at(2027, 3, 1, 0, 0, 0), id="mmdd-past-is-next-year"),
    pytest.param("10:00 04/01", at(2026, 4, 1, 10, 0, 0), id="clock-and-date"),
])
def test_begin_forms(value, expected):
    assert parse_begin(value, NOW) == expected
    assert spec(f"--begin={value}").spec.begin == expected


@pytest.mark.parametrize("value", ["", "later", "now+1fortnight", "25:00", "2026-13-01", "13:00pm", "now+", "0230"],
                         ids=["empty", "word", "unit", "hour", "month", "pm-hour", "no-count", "feb-30"])
def test_begin_refused(value):
    with pytest.raises(InvalidOption) as err:
        spec(f"--begin={value}")
    assert err.value.option == "--begin" and err.value.value == value


@pytest.mark.parametrize("value,expected", [
    pytest.param("10", KillSignal(number=10), id="number"),
    pytest.param("USR1@90", KillSignal(number=10, seconds=90), id="name-time"),
    pytest.param("SIGTERM", KillSignal(number=15), id="sig-prefix"),
    pytest.param("B:USR2@0", KillSignal(number=12, seconds=0, batch_only=True), id="batch"),
    pytest.param("R:INT", KillSignal(number=2, reservation=True), id="reservation"),
    pytest.param("RB:HUP@65535", KillSignal(number=1, seconds=65535, batch_only=True, reservation=True), id="both"),
    pytest.param("usr1", KillSignal(number=10), id="lower-case"),
])
def test_signal_forms(value, expected):
    assert parse_signal(value) == expected
    assert spec(f"--signal={value}").spec.kill_signal == expected


@pytest.mark.parametrize("value", ["0", "FOO", "USR1@", "USR1@65536", "USR1@x", "X:USR1", "BB:USR1", "65"],
                         ids=["zero", "name", "empty-time", "time-max", "time-word", "flag", "flag-twice", "number"])
def test_signal_refused(value):
    with pytest.raises(InvalidOption) as err:
        spec(f"--signal={value}")
    assert err.value.option == "--signal" and err.value.value == value


@pytest.mark.parametrize("value,terms", [
    pytest.param("a100", [("a100",)], id="one"),
    pytest.param("a100&ib", [("a100",), ("ib",)], id="and"),
    pytest.param("a100|h100", [("a100", "h100")], id="or"),
    pytest.param("[rack1|rack2]&ib", [("rack1", "rack2"), ("ib",)], id="matching-or"),
    pytest.param("a100*2&ib", [("a100",), ("ib",)], id="count"),
])
def test_constraint_forms(value, terms):
    assert spec("-C", value).spec.constraint == value  # kept as written, for Slurm
    assert constraint_terms(value) == terms


@pytest.mark.parametrize("value", ["", "a&&[", "a]", "a b", "[a|b"], ids=["empty", "open", "close", "blank", "unclosed"])
def test_constraint_refused(value):
    with pytest.raises(InvalidOption) as err:
        spec(f"--constraint={value}")
    assert err.value.option == "--constraint"


@pytest.mark.parametrize("value,expected", [("matlab", "matlab:1"), ("matlab:2,ansys", "matlab:2,ansys:1"),
                                            ("a:1|b:3", "a:1|b:3"), ("fluent=4", "fluent:4")],
                         ids=["bare", "all", "any", "equals"])
def test_licenses(value, expected):
    assert parse_licenses(value) == expected
    assert spec("-L", value).spec.licenses == expected


@pytest.mark.parametrize("value", ["a:0", "a:x", "a,b|c", ""], ids=["zero", "word", "mixed", "empty"])
def test_licenses_refused(value):
    with pytest.raises(InvalidOption):
        spec(f"--licenses={value}")


@pytest.mark.parametrize("argv,check", [
    pytest.param(["--time-min=90"], lambda s: s.time_min_seconds == 5400, id="time-min"),
    pytest.param(["--reservation=maint"], lambda s: s.reservation == "maint", id="reservation"),
    pytest.param(["--deadline=now+2hours"], lambda s: s.deadline == at(2026, 3, 10, 16, 30, 15), id="deadline"),
    pytest.param(["--tasks-per-node=3", "-N", "2"], lambda s: (s.ntasks_per_node, s.ntasks) == (3, 6), id="alias"),
    pytest.param(["--gpus-per-node=4", "--cpus-per-gpu=8"], lambda s: s.cpus_per_task == 32, id="cpus-per-gpu"),
    pytest.param(["--gpus-per-node=4", "--ntasks-per-node=4", "--cpus-per-gpu=8"], lambda s: s.cpus_per_task == 8,
                 id="cpus-per-gpu-per-task"),
    pytest.param(["--gres=gpu:2", "--mem-per-gpu=10G"], lambda s: s.mem_per_node_mib == 20480, id="mem-per-gpu"),
    pytest.param(["-N", "2", "--gpus-per-node=2", "--ntasks-per-gpu=2"], lambda s: s.ntasks == 8, id="ntasks-per-gpu"),
    pytest.param(["-G", "3", "--ntasks-per-gpu=1"], lambda s: s.ntasks == 3, id="ntasks-per-gpu-job"),
])
def test_mapped_options(argv, check):
    assert check(spec(*argv).spec)


@pytest.mark.parametrize("argv,option,fragment", [
    pytest.param(["--cpus-per-gpu=2"], "--cpus-per-gpu", "a GPU request", id="cpus-per-gpu-no-gpu"),
    pytest.param(["--mem-per-gpu=2G"], "--mem-per-gpu", "a GPU request", id="mem-per-gpu-no-gpu"),
    pytest.param(["-G", "1", "-c", "2", "--cpus-per-gpu=2"], "--cpus-per-gpu", "not both", id="cpus-both"),
    pytest.param(["-G", "1", "--mem=1G", "--mem-per-gpu=2G"], "--mem-per-gpu", "not both", id="mem-both"),
    pytest.param(["--gpus-per-task=1", "--ntasks-per-gpu=1"], "--ntasks-per-gpu", "not --gpus-per-task", id="per-task"),
    pytest.param(["--begin=now+2hours", "--deadline=now+1hour"], "--deadline", "after --begin", id="deadline-first"),
    pytest.param(["--time-min=0:x"], "--time-min", "minutes", id="time-min"),
])
def test_refused_options(argv, option, fragment):
    with pytest.raises(InvalidOption) as err:
        spec(*argv)
    assert err.value.option == option and fragment in err.value.accepted


@pytest.mark.parametrize("argv,fragment", [
    pytest.param(["-M", "c1"], "-M=c1: accepted, no effect", id="clusters"),
    pytest.param(["--get-user-env"], "--get-user-env: accepted, no effect", id="get-user-env"),
    pytest.param(["--get-user-env=10L"], "--get-user-env=10L", id="get-user-env-value"),
    pytest.param(["--profile=task"], "--profile is accepted", id="profile"),
    pytest.param(["--kill-on-invalid-dep=yes"], "--kill-on-invalid-dep is accepted", id="kill-on-invalid-dep"),
])
def test_options_with_no_effect_warn(argv, fragment):
    warnings = spec(*argv).warnings
    assert len(warnings) == 1 and fragment in warnings[0]


def test_every_problem_reported_at_once_with_its_value():
    with pytest.raises(InvalidOptions) as err:
        spec("-t", "0:x", "--uid", "7", "--signal=FOO", "-F", "hosts", "-c", "0",
             script="#SBATCH --nodes=x\n#SBATCH --bogus 7\ntrue\n")
    got = [(e.option, e.value) for e in err.value.errors]
    assert got == [("--nodes", "x"), ("--bogus", "7"), ("--uid", "7"), ("-F", "hosts"), ("-t", "0:x"),
                   ("--signal", "FOO"), ("-c", "0")]
    lines = str(err.value).split("\n")
    assert len(lines) == len(err.value.errors)
    assert any(line.startswith("#SBATCH line 3: --bogus: invalid value '7'") for line in lines)
    assert "None" not in str(err.value)


def test_spec_bounds_reported_together():
    with pytest.raises(InvalidOptions) as err:
        spec("--time-min=400-00:00:00", "--time=400-00:00:00")
    assert {e.option for e in err.value.errors} == {"--time", "--time-min"}


def test_begin_is_read_in_the_clock_given():
    later = NOW + timedelta(days=1)
    assert build_spec(["--begin=now+1hour", "--wrap", "true"], now=later).spec.begin == at(2026, 3, 11, 15, 30, 15)


@pytest.mark.parametrize("value,ids,running", [
    pytest.param("[0-3]", [0, 1, 2, 3], None, id="brackets"),
    pytest.param("[0-3,5]%2", [0, 1, 2, 3, 5], 2, id="brackets-throttle"),
])
def test_array_in_brackets(value, ids, running):
    array = spec(f"--array={value}").spec.array
    assert (array.task_ids, array.max_running) == (ids, running)


@pytest.mark.parametrize("value,deps", [
    pytest.param("afterok:7_[1-3]", [(7, 1), (7, 2), (7, 3)], id="task-list"),
    pytest.param("afterok:7_[1-2]:8_2", [(7, 1), (7, 2), (8, 2)], id="task-list-and-task"),
    pytest.param("afterok:7_*", [(7, None)], id="all-tasks"),
])
def test_array_task_dependencies(value, deps):
    got = spec(f"--dependency={value}").spec.dependency.deps
    assert [(d.job_id, d.array_task) for d in got] == deps


def test_an_empty_dependency_clears_the_scripts():
    assert spec(script="#SBATCH -d afterok:5\ntrue\n").spec.dependency is not None
    assert spec("--dependency=", script="#SBATCH -d afterok:5\ntrue\n").spec.dependency is None


def test_layout_options_are_kept_for_slurm_as_written():
    script = "#SBATCH --hint=nomultithread\n#SBATCH -m block:cyclic\n#SBATCH --tmp=10G\nsrun true\n"
    got = spec("--ntasks-per-core=1", "-s", "--tmp=20G", script=script).spec
    # sbatch's order of precedence per option (the command line wins), in one fixed order
    assert got.slurm_options == ["--hint=nomultithread", "--distribution=block:cyclic", "--ntasks-per-core=1",
                                 "--tmp=20G", "--oversubscribe"]


def test_a_job_with_slurm_only_options_goes_only_to_slurm_pools():
    from crossdock.queue.admission import resolve
    from crossdock.queue.config import ClusterConfig
    from crossdock.queue.errors import InvalidJob

    cfg = ClusterConfig.model_validate({
        "priority_classes": {"batch": {"value": 1}},
        "pools": {"cpu": {"backend": "k8s"}, "hpc": {"backend": "slurm", "partition": "cpu"}},
        "queues": {"mixed": {"priority_class": "batch", "pools": ["cpu", "hpc"]},
                   "kube": {"priority_class": "batch", "pools": ["cpu"]}},
        "default_queue": "mixed",
    })
    job = spec("--hint=nomultithread", script="true\n").spec
    assert resolve(job, cfg).pools == ("hpc",)
    with pytest.raises(InvalidJob, match=r"--hint=nomultithread: only a Slurm pool can honour it.*\(hpc\) with -p"):
        resolve(job.model_copy(update={"queue": "kube"}), cfg)


def test_python_api_slurm_options_are_checked_by_name():
    from pydantic import ValidationError

    from crossdock.queue.models import JobSpec

    assert JobSpec(command=["true"], slurm_options=["--threads-per-core=1"]).slurm_options == ["--threads-per-core=1"]
    with pytest.raises(ValidationError, match="--uid=0.*is not an sbatch option crossdock passes"):
        JobSpec(command=["true"], slurm_options=["--uid=0"])
