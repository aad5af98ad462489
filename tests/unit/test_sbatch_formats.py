"""Value formats of sbatch options.

Expected values come from Slurm's manual and from what ``sbatch --test-only -v`` 22.05 prints
for the same input (``time : 00:02:00`` for ``-t 1:30``, ``mem : 1`` for ``--mem 1K``...).
Where crossdock is stricter than Slurm on purpose (zero counts), the test says so.
"""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossdock.queue.errors import InvalidOption
from crossdock.queue.models import DependencyType
from crossdock.queue.sbatch_formats import (
    MAX_HOSTLIST_HOSTS,
    NICE_DEFAULT,
    export_environment,
    format_array,
    parse_array,
    parse_count,
    parse_dependency,
    parse_export,
    parse_gpus,
    parse_gres,
    parse_hostlist,
    parse_mem,
    parse_nice,
    parse_nodes,
    parse_time,
)

# --- --time ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,minutes",
    [
        pytest.param("1", 1, id="minutes"),
        pytest.param("90", 90, id="minutes-over-an-hour"),
        pytest.param("1:30", 2, id="mm:ss-rounds-up"),
        pytest.param("0:30", 1, id="seconds-only-round-up-to-one"),
        pytest.param("2:00", 2, id="mm:ss-exact"),
        pytest.param("1:2:3", 63, id="hh:mm:ss-rounds-up"),
        pytest.param("01:00:00", 60, id="hh:mm:ss"),
        pytest.param("2-0", 2880, id="d-hh"),
        pytest.param("1-2", 1560, id="d-hh-2"),
        pytest.param("1-2:3", 1563, id="d-hh:mm"),
        pytest.param("1-2:3:4", 1564, id="d-hh:mm:ss-rounds-up"),
        pytest.param("1-", 1440, id="d-dash-alone"),
        pytest.param("525600", 525600, id="a-year"),
        pytest.param("0:90", 2, id="fields-not-range-checked"),
    ],
)
def test_parse_time_valid(text, minutes):
    assert parse_time(text) == minutes * 60  # seconds, rounded up to whole minutes as Slurm does


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("0", id="zero"),
        pytest.param("-1", id="minus-one"),
        pytest.param("0:0", id="zero-mm:ss"),
        pytest.param("00:00:00", id="zero-hh:mm:ss"),
        pytest.param("UNLIMITED", id="unlimited"),
        pytest.param("infinite", id="infinite-any-case"),
        pytest.param("Unlimited", id="unlimited-any-case"),
    ],
)
def test_parse_time_no_limit(text):
    assert parse_time(text) is None


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("1:2:3:4", id="four-fields"),
        pytest.param("::1", id="empty-fields"),
        pytest.param("1-:5", id="day-empty-hour"),
        pytest.param("1-2:", id="trailing-colon"),
        pytest.param(":30", id="leading-colon"),
        pytest.param(" 5", id="leading-space"),
        pytest.param("5s", id="unit-suffix"),
        pytest.param("1.5", id="decimal"),
        pytest.param("-5", id="negative"),
        pytest.param("1-2-3", id="two-dashes"),
        pytest.param("1:2-3", id="dash-after-colon"),
        pytest.param("abc", id="word"),
    ],
)
def test_parse_time_invalid(text):
    with pytest.raises(InvalidOption) as err:
        parse_time(text)
    assert err.value.option == "--time"
    assert err.value.value == text
    assert "D-HH:MM:SS" in err.value.accepted


@pytest.mark.parametrize("text", ["10000000", "365-00:01", "1000000000-0", "9" * 19, "9" * 5000, "١٢", "²"])
def test_parse_time_refuses_limits_beyond_a_year_and_non_ascii_digits(text):
    # crossdock's bound (Slurm takes any count of minutes): a limit past a year is INFINITE
    with pytest.raises(InvalidOption) as err:
        parse_time(text)
    assert "at most 365 days" in err.value.accepted


@given(
    days=st.integers(0, 364),
    hours=st.integers(0, 23),
    minutes=st.integers(0, 59),
    seconds=st.integers(0, 59),
)
def test_parse_time_matches_arithmetic(days, hours, minutes, seconds):
    total = days * 86400 + hours * 3600 + minutes * 60 + seconds
    expected = None if total == 0 else -(-total // 60) * 60
    assert parse_time(f"{days}-{hours:02d}:{minutes:02d}:{seconds:02d}") == expected
    if days == 0:
        assert parse_time(f"{hours}:{minutes:02d}:{seconds:02d}") == expected
        if hours == 0:
            assert parse_time(f"{minutes}:{seconds:02d}") == expected


# --- --mem ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,mib",
    [
        pytest.param("0", 0, id="zero-means-whole-node"),
        pytest.param("500", 500, id="mib-default"),
        pytest.param("1K", 1, id="k-rounds-up"),
        pytest.param("1024K", 1, id="k-exact"),
        pytest.param("1025K", 2, id="k-rounds-up-over"),
        pytest.param("1KB", 1, id="kb"),
        pytest.param("1kb", 1, id="kb-lower"),
        pytest.param("1M", 1, id="m"),
        pytest.param("2G", 2048, id="g"),
        pytest.param("2GB", 2048, id="gb"),
        pytest.param("1g", 1024, id="g-lower"),
        pytest.param("1T", 1048576, id="t"),
    ],
)
def test_parse_mem_valid(text, mib):
    assert parse_mem(text) == mib


@pytest.mark.parametrize(
    "text", ["", "1B", "1.5G", "-1", "1Gi", "G", "1GBB", "1 G", "one"], ids=lambda t: repr(t)
)
def test_parse_mem_invalid(text):
    with pytest.raises(InvalidOption) as err:
        parse_mem(text, "--mem-per-cpu")
    assert err.value.option == "--mem-per-cpu"
    assert err.value.value == text


@given(st.integers(0, 10**9))
def test_parse_mem_k_rounds_up(kib):
    assert parse_mem(f"{kib}K") == -(-kib // 1024)
    assert parse_mem(f"{kib}K") * 1024 >= kib


# --- --gres and --gpus ----------------------------------------------------------------------


def _gres(value):
    return [(g.name, g.type, g.count) for g in parse_gres(value)]


@pytest.mark.parametrize(
    "text,expected",
    [
        pytest.param("gpu:2", [("gpu", None, 2)], id="name-count"),
        pytest.param("gpu:a100:2", [("gpu", "a100", 2)], id="name-type-count"),
        pytest.param("gpu:a100", [("gpu", "a100", 1)], id="name-type"),
        pytest.param("gpu", [("gpu", None, 1)], id="name"),
        pytest.param("gpu:1k", [("gpu", None, 1024)], id="count-suffix"),
        pytest.param("gpu:1g.10gb:1", [("gpu", "1g.10gb", 1)], id="mig-type"),
        pytest.param("gpu:0", [], id="zero-count-is-none"),
        pytest.param("gpu:a100:0,nvme:1", [("nvme", None, 1)], id="zero-count-typed-dropped"),
        pytest.param(
            "gpu:a100:2,nvme:1,shard:l4:3",
            [("gpu", "a100", 2), ("nvme", None, 1), ("shard", "l4", 3)],
            id="list",
        ),
        pytest.param("gpu:a100:1,gpu:l4:1", [("gpu", "a100", 1), ("gpu", "l4", 1)], id="two-types"),
        pytest.param("none", [], id="none"),
    ],
)
def test_parse_gres_valid(text, expected):
    assert _gres(text) == expected


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("gpu:a100:x", id="bad-count"),
        pytest.param("gpu:65536", id="gpu-count-over-limit"),
        pytest.param("gpu:2147483647", id="gpu-count-int-max"),
        pytest.param("gpu::2", id="empty-type"),
        pytest.param("gpu:a100:2:3", id="four-fields"),
        pytest.param("gres/gpu:1", id="tres-prefix-refused-by-22.05"),
        pytest.param("gpu:2,", id="trailing-comma"),
        pytest.param(":2", id="no-name"),
        pytest.param("gpu:a100:2,gpu:a100:1", id="same-name-type-twice"),
    ],
)
def test_parse_gres_invalid(text):
    with pytest.raises(InvalidOption) as err:
        parse_gres(text)
    assert err.value.option == "--gres"
    assert "name[:type][:count]" in err.value.accepted


@pytest.mark.parametrize(
    "text,per,expected",
    [
        pytest.param("2", "job", (2, None, "job"), id="count"),
        pytest.param("a100:2", "job", (2, "a100", "job"), id="type-count"),
        pytest.param("a100", "job", (1, "a100", "job"), id="type-alone-is-one"),
        pytest.param("4", "node", (4, None, "node"), id="per-node"),
        pytest.param("l4:1", "task", (1, "l4", "task"), id="per-task"),
    ],
)
def test_parse_gpus_valid(text, per, expected):
    g = parse_gpus(text, per)
    assert (g.count, g.type, g.per) == expected


@pytest.mark.parametrize(
    "text,per,option",
    [
        pytest.param("0", "job", "--gpus", id="zero"),
        pytest.param("-1", "job", "--gpus", id="negative"),
        pytest.param("", "node", "--gpus-per-node", id="empty"),
        pytest.param("gpu:a100:2", "job", "--gpus", id="gres-form"),
        pytest.param("a100:2,l4:1", "task", "--gpus-per-task", id="several-types"),
        pytest.param("a100:x", "job", "--gpus", id="bad-count"),
    ],
)
def test_parse_gpus_invalid(text, per, option):
    with pytest.raises(InvalidOption) as err:
        parse_gpus(text, per)
    assert err.value.option == option


# --- --array --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,ids,max_running",
    [
        pytest.param("0-15:4%2", [0, 4, 8, 12], 2, id="range-step-throttle"),
        pytest.param("0-15:4", [0, 4, 8, 12], None, id="range-step"),
        pytest.param("1,3,5-7", [1, 3, 5, 6, 7], None, id="list-and-range"),
        pytest.param("7", [7], None, id="single"),
        pytest.param("0-1000", list(range(1001)), None, id="up-to-max"),
        pytest.param("1-5%1", [1, 2, 3, 4, 5], 1, id="one-at-a-time"),
        pytest.param("5,1,5,3", [1, 3, 5], None, id="sorted-unique"),
        pytest.param("1,,2", [1, 2], None, id="empty-item-skipped-like-slurm"),
        pytest.param("0-3%0", [0, 1, 2, 3], None, id="throttle-zero-is-none"),
        pytest.param("1-10:20", [1], None, id="step-past-end"),
    ],
)
def test_parse_array_valid(text, ids, max_running):
    spec = parse_array(text)
    assert spec.task_ids == ids
    assert spec.max_running == max_running


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("5-1", id="descending"),
        pytest.param("3:2", id="step-without-range"),
        pytest.param("0-1001", id="past-max-array-size"),
        pytest.param("1001", id="id-equal-max-array-size"),
        pytest.param("%2", id="no-ids"),
        pytest.param("0-15:0", id="step-zero"),
        pytest.param("1-5%x", id="bad-throttle"),
        pytest.param("-1", id="negative"),
        pytest.param("1-5%2%3", id="two-throttles"),
        pytest.param("a-b", id="words"),
    ],
)
def test_parse_array_invalid(text):
    with pytest.raises(InvalidOption) as err:
        parse_array(text)
    assert err.value.option == "--array"
    assert "0 to 1000" in err.value.accepted


def test_parse_array_max_array_size_is_configurable():
    assert parse_array("0-4999", max_array_size=5000).task_ids[-1] == 4999
    with pytest.raises(InvalidOption, match="MaxArraySize is 10"):
        parse_array("10", max_array_size=10)


@given(st.sets(st.integers(0, 1000), min_size=1), st.one_of(st.none(), st.integers(1, 50)))
def test_format_array_round_trips(ids, throttle):
    spec = parse_array(format_array(ids, throttle))
    assert spec.task_ids == sorted(ids)
    assert spec.max_running == throttle


@given(st.integers(0, 900), st.integers(0, 100), st.integers(1, 30))
def test_parse_array_step_matches_range(first, span, step):
    assert parse_array(f"{first}-{first + span}:{step}").task_ids == list(range(first, first + span + 1, step))


# --- --dependency ---------------------------------------------------------------------------


def _deps(text):
    spec = parse_dependency(text)
    return spec.combine, [(d.type.value, d.job_id, d.array_task, d.delay_minutes) for d in spec.deps]


@pytest.mark.parametrize(
    "text,combine,deps",
    [
        pytest.param("afterok:1", "AND", [("afterok", 1, None, None)], id="afterok"),
        pytest.param(
            "afterok:20:21,afterany:23",
            "AND",
            [("afterok", 20, None, None), ("afterok", 21, None, None), ("afterany", 23, None, None)],
            id="man-page-and",
        ),
        pytest.param(
            "afterok:20:21?afterany:23",
            "OR",
            [("afterok", 20, None, None), ("afterok", 21, None, None), ("afterany", 23, None, None)],
            id="man-page-or",
        ),
        pytest.param("after:1+5", "AND", [("after", 1, None, 5)], id="after-delay"),
        pytest.param("after:1+5:2+1", "AND", [("after", 1, None, 5), ("after", 2, None, 1)], id="after-delays"),
        pytest.param("afterany:1+3", "AND", [("afterany", 1, None, 3)], id="delay-read-after-any-type"),
        pytest.param("afterok:1_2", "AND", [("afterok", 1, 2, None)], id="array-task"),
        pytest.param("after:1_2+5", "AND", [("after", 1, 2, 5)], id="array-task-delay"),
        pytest.param("afterok:1_*", "AND", [("afterok", 1, None, None)], id="whole-array"),
        pytest.param("singleton", "AND", [("singleton", None, None, None)], id="singleton"),
        pytest.param("SINGLETON", "AND", [("singleton", None, None, None)], id="singleton-any-case"),
        pytest.param("AFTEROK:1", "AND", [("afterok", 1, None, None)], id="type-any-case"),
        pytest.param("afternotok:7", "AND", [("afternotok", 7, None, None)], id="afternotok"),
        pytest.param("aftercorr:7", "AND", [("aftercorr", 7, None, None)], id="aftercorr"),
        pytest.param("afterburstbuffer:7", "AND", [("afterburstbuffer", 7, None, None)], id="afterburstbuffer"),
        pytest.param("1", "AND", [("afterany", 1, None, None)], id="bare-id-is-afterany"),
        pytest.param("1,2", "AND", [("afterany", 1, None, None), ("afterany", 2, None, None)], id="bare-ids"),
        pytest.param(
            "afterok:5,singleton", "AND", [("afterok", 5, None, None), ("singleton", None, None, None)], id="mixed-types"
        ),
    ],
)
def test_parse_dependency_valid(text, combine, deps):
    assert _deps(text) == (combine, deps)


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("afterok:1,afterany:2?after:3", id="mixing-and-or"),
        pytest.param("afterok:", id="no-job-id"),
        pytest.param("afterok:0", id="job-zero"),
        pytest.param("afterok:-1", id="negative-job"),
        pytest.param("afterok:1,", id="trailing-comma"),
        pytest.param("afterok:1?", id="trailing-question-mark"),
        pytest.param("afterok:1,,afterok:2", id="empty-item"),
        pytest.param("singleton:1", id="singleton-with-id"),
        pytest.param("expand:1", id="expand-unsupported"),
        pytest.param("after:1+0", id="zero-delay"),
        pytest.param("after:1+-5", id="negative-delay"),
        pytest.param("after:1+1:00", id="delay-not-a-time"),
        pytest.param("afterok:1_2_3", id="bad-array-task"),
        pytest.param("1:2", id="bare-ids-with-colon"),
        pytest.param("1?2", id="bare-ids-with-or"),
        pytest.param("afterwards:1", id="unknown-type"),
    ],
)
def test_parse_dependency_invalid(text):
    with pytest.raises(InvalidOption) as err:
        parse_dependency(text, "-d")
    assert err.value.option == "-d"
    assert err.value.value == text
    assert "afterok" in err.value.accepted


@given(
    st.sampled_from([t.value for t in DependencyType if t is not DependencyType.SINGLETON]),
    st.lists(st.integers(1, 10**9), min_size=1, max_size=5),
    st.sampled_from([",", "?"]),
)
def test_parse_dependency_keeps_every_job(dtype, jobs, sep):
    text = sep.join(f"{dtype}:{j}" for j in jobs)
    combine, deps = _deps(text)
    assert combine == ("OR" if sep == "?" and len(jobs) > 1 else "AND")
    assert [d[1] for d in deps] == jobs
    assert {d[0] for d in deps} == {dtype}


# --- counts, nodes, nice --------------------------------------------------------------------


@pytest.mark.parametrize("text,expected", [("1", 1), ("16", 16), ("007", 7)])
def test_parse_count_valid(text, expected):
    assert parse_count(text, "-c") == expected


@pytest.mark.parametrize("text", ["0", "-1", "2x", "", "1.0", " 1"])
def test_parse_count_refuses_zero_negative_and_junk(text):
    with pytest.raises(InvalidOption) as err:
        parse_count(text, "--cpus-per-task")
    assert (err.value.option, err.value.value) == ("--cpus-per-task", text)


@pytest.mark.parametrize(
    "text,expected",
    [("1", (1, None)), ("2-3", (2, 3)), ("2-2", (2, None)), ("1k", (1024, None)), ("1-2K", (1, 2048))],
)
def test_parse_nodes_valid(text, expected):
    assert parse_nodes(text) == expected


@pytest.mark.parametrize("text", ["0", "3-2", "2-", "-2", "x", "", "0-2", "1-2-3"])
def test_parse_nodes_invalid(text):
    with pytest.raises(InvalidOption) as err:
        parse_nodes(text, "-N")
    assert err.value.option == "-N"


@pytest.mark.parametrize(
    "text,expected",
    [(None, NICE_DEFAULT), ("5", 5), ("-5", -5), ("+5", 5), ("2147483645", 2147483645), ("-2147483645", -2147483645)],
)
def test_parse_nice_valid(text, expected):
    assert parse_nice(text) == expected


@pytest.mark.parametrize("text", ["abc", "2147483646", "-2147483646", "", "1.5"])
def test_parse_nice_invalid(text):
    with pytest.raises(InvalidOption):
        parse_nice(text)


# --- --export -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text,mode,assigned",
    [
        pytest.param("ALL", "ALL", {}, id="all"),
        pytest.param("all", "ALL", {}, id="all-any-case"),
        pytest.param("NONE", "NONE", {}, id="none"),
        pytest.param("ALL,FOO=bar", "ALL", {"FOO": "bar"}, id="all-plus-assignment"),
        pytest.param("FOO", "FOO", {}, id="name-only"),
        pytest.param("FOO,BAR=1", "FOO", {"BAR": "1"}, id="name-and-assignment"),
        pytest.param("BAR=1", "NONE", {"BAR": "1"}, id="assignment-only"),
        pytest.param("NONE,FOO=1", "NONE", {"FOO": "1"}, id="none-plus-assignment"),
        pytest.param("A=x=y", "NONE", {"A": "x=y"}, id="value-with-equals"),
        pytest.param("A=", "NONE", {"A": ""}, id="empty-value"),
    ],
)
def test_parse_export(text, mode, assigned):
    assert parse_export(text) == (mode, assigned)


@pytest.mark.parametrize("text", ["", "1FOO=1", "FOO-BAR", "ALL,,FOO", "=1"])
def test_parse_export_invalid(text):
    with pytest.raises(InvalidOption) as err:
        parse_export(text)
    assert err.value.option == "--export"


def test_export_environment_follows_slurm():
    env = {"HOME": "/h", "PATH": "/bin", "SLURM_CONF": "/etc/s", "FOO": "1"}
    assert export_environment("ALL", {"X": "2"}, env) == {**env, "X": "2"}
    assert export_environment("NONE", {}, env) == {"SLURM_CONF": "/etc/s"}
    assert export_environment("FOO,PATH", {"FOO": "9"}, env) == {"FOO": "9", "PATH": "/bin", "SLURM_CONF": "/etc/s"}


# --- --nodelist, --exclude (the grammar itself: test_hostlist.py) ---------------------------


@pytest.mark.parametrize(
    "text,hosts",
    [
        pytest.param("node1", ["node1"], id="single"),
        pytest.param("node[1-3,5]", ["node1", "node2", "node3", "node5"], id="ranges"),
        pytest.param("node[01-03]", ["node01", "node02", "node03"], id="zero-padded"),
        pytest.param("node[8-11]", ["node8", "node9", "node10", "node11"], id="widening"),
        pytest.param("a,b[1-2],c", ["a", "b1", "b2", "c"], id="top-level-list"),
        pytest.param("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"], id="two-dimensions"),
        pytest.param("cpu1,cpu[1-2]", ["cpu1", "cpu2"], id="duplicates-dropped"),
        pytest.param("gpu-a100-1", ["gpu-a100-1"], id="dashes-in-name"),
    ],
)
def test_parse_hostlist(text, hosts):
    assert parse_hostlist(text) == hosts


@pytest.mark.parametrize(
    "text",
    [
        pytest.param("", id="empty"),
        pytest.param("cpu[1-2", id="unbalanced-open"),
        pytest.param("cpu1-2]", id="unbalanced-close"),
        pytest.param("cpu[2-1]", id="descending"),
        pytest.param("cpu[a-b]", id="letters"),
        pytest.param("cpu[[1]]", id="nested"),
        pytest.param("a,,b", id="empty-host"),
        pytest.param("/etc/hosts", id="node-file"),
        pytest.param(f"n[0-{MAX_HOSTLIST_HOSTS}]", id="too-many"),
        pytest.param("bad host", id="space"),
    ],
)
def test_parse_hostlist_invalid(text):
    with pytest.raises(InvalidOption) as err:
        parse_hostlist(text, "-x")
    assert err.value.option == "-x"


@given(st.integers(0, 500), st.integers(0, 50), st.integers(1, 4))
def test_parse_hostlist_range_matches_arithmetic(lo, span, width):
    text = f"n[{lo:0{width}d}-{lo + span:0{width}d}]"
    pad = width if width > 1 and len(str(lo)) < width else 0
    expected = [f"n{i:0{pad}d}" if pad else f"n{i}" for i in range(lo, lo + span + 1)]
    assert parse_hostlist(text) == expected
