"""sbatch compatibility: ``#SBATCH`` reading, option syntax, precedence, the built spec and
the dry-run JSON.

Directive-reading cases mirror what sbatch 22.05 does with the same script (its
``--test-only -v`` output): where the words end, which lines count, which errors it raises.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossdock.queue.errors import InvalidOption
from crossdock.queue.sbatch import (
    InvalidDirective,
    build_spec,
    dry_run_json,
    read_sbatch_directives,
    split_argv,
)

SH = "#!/bin/sh\n"


def spec_of(argv=(), script=None, path="job.sh", args=(), **kw):
    if script is not None:
        return build_spec(list(argv), script_text=script, script_path=path, script_args=list(args), **kw).spec
    return build_spec(list(argv), **kw).spec


def wrap(*argv, **kw):
    return build_spec(["--wrap", "true", *argv], **kw)


# --- reading #SBATCH lines ------------------------------------------------------------------


@pytest.mark.parametrize(
    "script,argv",
    [
        pytest.param(SH + "#SBATCH -t 5\n#SBATCH --mem=1G\necho\n", ["-t", "5", "--mem=1G"], id="basic"),
        pytest.param(
            SH + '#SBATCH -J "my job" -t 5 # comment -p nope\necho\n#SBATCH -p gpu\n',
            ["-J", "my job", "-t", "5"],
            id="comment-and-stop-at-first-command",
        ),
        pytest.param(SH + "#SBATCH --job-name=a#b -t 5\n", ["--job-name=a"], id="hash-inside-word-ends-line"),
        pytest.param(SH + "#SBATCH --job-name=a\\#b\n", ["--job-name=a#b"], id="escaped-hash"),
        pytest.param(SH + "#SBATCH --job-name='x\\'y'\n", ["--job-name=x'y"], id="escape-inside-single-quotes"),
        pytest.param(SH + "#SBATCH -J 'a \"b\" c'\n", ["-J", 'a "b" c'], id="double-inside-single"),
        pytest.param(SH + "#SBATCH -J 'a#b'\n", ["-J", "a#b"], id="quoted-hash"),
        pytest.param(SH + "#SBATCH -J a' 'b\n", ["-J", "a b"], id="quote-mid-word"),
        pytest.param(
            SH + "  # indented comment\n\n#SBATCH -t 7\n #SBATCH -t 9\n", ["-t", "7"], id="indented-is-a-comment"
        ),
        pytest.param(SH + "#SBATCH -J\n#SBATCH foo\n", ["-J", "foo"], id="words-join-across-lines"),
        pytest.param(SH + '#SBATCH -J "" -t 3\n', ["-J"], id="empty-word-ends-line"),
        pytest.param(SH + "#sbatch -t 3\n#SBATCH  \t -t 4\t\n", ["-t", "4"], id="case-sensitive-magic"),
        pytest.param(SH + "echo\n#SBATCH -t 3\n", [], id="after-command-ignored"),
        pytest.param(SH + "#SBATCH --export=ALL,A=$(whoami)\n", ["--export=ALL,A=$(whoami)"], id="no-expansion"),
        pytest.param("#!/bin/sh\n#SBATCH -J été\n", ["-J", "été"], id="unicode"),
        pytest.param("", [], id="empty-script"),
    ],
)
def test_read_sbatch_directives(script, argv):
    assert read_sbatch_directives(script) == argv


@pytest.mark.parametrize(
    "script,line,fragment",
    [
        pytest.param(SH + '#SBATCH -J "a b\n', 2, 'unmatched "', id="unmatched-quote"),
        pytest.param(SH + "#SBATCH : -t 3\n", 2, "':'", id="het-separator"),
        pytest.param(SH + "#SBATCH -t 1\n#SBATCH hetjob\n", 3, "heterogeneous", id="hetjob"),
    ],
)
def test_read_sbatch_directives_errors(script, line, fragment):
    with pytest.raises(InvalidDirective) as err:
        read_sbatch_directives(script)
    assert err.value.line == line
    assert fragment in err.value.accepted
    assert str(err.value).startswith(f"#SBATCH line {line}:")


@given(st.text(alphabet=st.characters(blacklist_characters="\n\r\0", blacklist_categories=("Cs",)), min_size=1))
def test_directive_quoting_round_trips(word):
    # Double quotes plus a backslash before every character protect any text from sbatch.
    quoted = '"' + "".join("\\" + ch for ch in word) + '"'
    assert read_sbatch_directives(f"{SH}#SBATCH -J {quoted}\n") == ["-J", word]


def test_escaped_blank_still_ends_a_word_as_in_sbatch():
    # sbatch's _get_argument tests for a blank before it looks at the escape flag.
    assert read_sbatch_directives(SH + "#SBATCH -J a\\ b\n") == ["-J", "a", "b"]


# --- script-level errors --------------------------------------------------------------------


@pytest.mark.parametrize(
    "script,option,fragment",
    [
        pytest.param("echo hi\n", "SCRIPT", "#!", id="no-shebang"),
        pytest.param("#!/bin/sh\r\n#SBATCH -t 3\r\n", "SCRIPT", "DOS", id="dos-line-breaks"),
        pytest.param("#!/bin/sh\necho \0\n", "SCRIPT", "NUL", id="nul"),
    ],
)
def test_script_shape_errors(script, option, fragment):
    with pytest.raises(InvalidOption) as err:
        spec_of(script=script)
    assert err.value.option == option
    assert fragment in err.value.accepted


@pytest.mark.parametrize(
    "script,line,option,value",
    [
        pytest.param(SH + "#SBATCH -t 5\n#SBATCH --time=abc\n", 3, "--time", "abc", id="bad-value"),
        pytest.param(SH + "#SBATCH --foo\n", 2, "--foo", None, id="unknown-option"),
        pytest.param(SH + "#SBATCHX -t 3\n", 2, "#SBATCH", "X", id="glued-magic-word"),
        pytest.param(SH + "#SBATCH hello -t 4\n", 2, "#SBATCH", "hello", id="not-an-option"),
        pytest.param(SH + "#SBATCH -J\n", 2, "-J", None, id="missing-value"),
        pytest.param(SH + "#SBATCH -c 0\n", 2, "-c", "0", id="zero-count"),
        pytest.param(SH + "#SBATCH --mem=1G --mem-per-cpu=1G\n", 2, "--mem-per-cpu", "1G", id="mem-exclusive"),
    ],
)
def test_bad_directives_name_line_option_and_value(script, line, option, value):
    with pytest.raises(InvalidDirective) as err:
        spec_of(script=script)
    assert (err.value.line, err.value.option, err.value.value) == (line, option, value)
    assert "\n" not in str(err.value)


def test_wrap_inside_a_script_is_ignored_like_sbatch():
    sub = build_spec([], script_text=SH + "#SBATCH --wrap=hostname\n", script_path="s.sh")
    assert sub.spec.command is None and sub.spec.script_path == "s.sh"
    assert any("--wrap" in w for w in sub.warnings)


# --- option syntax --------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--cpus-per-task=4"], id="long-equals"),
        pytest.param(["--cpus-per-task", "4"], id="long-space"),
        pytest.param(["-c4"], id="short-attached"),
        pytest.param(["-c", "4"], id="short-space"),
        pytest.param(["--cpus-per-t=4"], id="unique-prefix"),
        pytest.param(["-c", "2", "-c", "4"], id="last-wins"),
    ],
)
def test_option_forms(argv):
    assert wrap(*argv).spec.cpus_per_task == 4


def test_clustered_short_flags():
    spec = wrap("-Hc4").spec
    assert spec.hold and spec.cpus_per_task == 4


def test_required_value_may_start_with_a_dash():
    assert wrap("-t", "-1").spec.time_limit_seconds is None
    assert wrap("-J", "--x").spec.name == "--x"


def test_optional_values_only_after_equals():
    assert wrap("--nice").spec.nice == 100
    assert wrap("--nice=-5").spec.nice == -5
    # like getopt: "--nice 5" is --nice without a value, then a stray word
    with pytest.raises(InvalidOption) as err:
        wrap("--nice", "5")
    assert (err.value.option, err.value.value) == ("ARGUMENT", "5")


@pytest.mark.parametrize(
    "argv,option,fragment",
    [
        pytest.param(["--tme=5"], "--tme", "did you mean --time?", id="typo"),
        pytest.param(["-Z"], "-Z", "--job-name", id="unknown-short"),
        pytest.param(["--uid=0"], "--uid", "runs as the user who submits it", id="refused-sbatch-option"),
        pytest.param(["-W"], "-W", "crossdock does not take --wait", id="refused-short"),
        pytest.param(["--gpu=2"], "--gpu", "--gpus-per-node", id="ambiguous-prefix"),
        pytest.param(["--hold=yes"], "--hold", "without a value", id="flag-with-value"),
        pytest.param(["-t"], "-t", "a value", id="missing-value"),
        pytest.param(["--exclusive=user"], "--exclusive", "not supported", id="exclusive-user"),
        pytest.param(["-N", "0"], "-N", "counts >= 1", id="zero-nodes"),
        pytest.param(["-n", "-1"], "-n", ">= 1", id="negative-tasks"),
        pytest.param(["--ntasks-per-node=0"], "--ntasks-per-node", ">= 1", id="zero-tasks-per-node"),
        pytest.param(["-G", "0"], "-G", "count >= 1", id="zero-gpus"),
        pytest.param(["--mem=1G", "--mem-per-cpu=1G"], "--mem-per-cpu", "not both", id="mem-exclusive"),
        pytest.param(["-G", "1", "--gpus-per-node=1"], "--gpus-per-node", "not both", id="gpu-kinds"),
        pytest.param(["-p", ""], "-p", "non-empty", id="empty-partition"),
        pytest.param(["-w", "cpu1", "-x", "cpu1"], "--exclude", "not also required", id="require-and-exclude"),
        pytest.param(["-N", "1", "-w", "cpu[1-2]"], "--nodelist", "at most 1", id="nodelist-over-nodes"),
    ],
)
def test_bad_options(argv, option, fragment):
    with pytest.raises(InvalidOption) as err:
        wrap(*argv)
    assert err.value.option == option
    assert fragment in err.value.accepted
    assert "\n" not in str(err.value)


def test_unknown_option_error_carries_its_value():
    with pytest.raises(InvalidOption) as err:
        wrap("--partitoin=gpu")
    assert (err.value.option, err.value.value) == ("--partitoin", "gpu")


def test_compatibility_options_are_accepted_with_a_warning():
    sub = wrap("-A", "proj", "--mail-type=END", "--mail-user=a@b")
    assert len(sub.warnings) == 3 and all("no effect" in w for w in sub.warnings)


# --- split_argv -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "argv,expected",
    [
        pytest.param(["-t", "5", "job.sh", "-t", "6"], (["-t", "5"], "job.sh", ["-t", "6"]), id="stops-at-script"),
        pytest.param(["-t", "5", "--", "-job.sh", "x"], (["-t", "5"], "-job.sh", ["x"]), id="double-dash"),
        pytest.param(["-J", "job.sh", "run.sh"], (["-J", "job.sh"], "run.sh", []), id="value-is-not-the-script"),
        pytest.param(["--wrap", "echo hi"], (["--wrap", "echo hi"], None, []), id="no-script"),
        pytest.param(["--nice", "job.sh"], (["--nice"], "job.sh", []), id="optional-value-flag"),
        pytest.param(["-"], ([], "-", []), id="stdin-dash"),
    ],
)
def test_split_argv(argv, expected):
    assert split_argv(argv) == expected


def test_build_spec_refuses_positional_words_in_options():
    with pytest.raises(InvalidOption) as err:
        build_spec(["-t", "5", "job.sh"], script_text=SH)
    assert (err.value.option, err.value.value) == ("ARGUMENT", "job.sh")


# --- precedence -----------------------------------------------------------------------------


def test_command_line_overrides_directives_option_by_option():
    script = SH + "#SBATCH -t 10 -c 2 -J from-script\n#SBATCH --mem=4G --gpus-per-node=2\n"
    spec = spec_of(["-t", "20", "--mem=1G", "--gpus-per-node=a100:4"], script=script)
    assert spec.time_limit_seconds == 20 * 60  # overridden
    assert spec.cpus_per_task == 2  # kept from the script
    assert spec.name == "from-script"
    assert spec.mem_per_node_mib == 1024
    assert (spec.gpus.count, spec.gpus.type, spec.gpus.per) == (4, "a100", "node")


@pytest.mark.parametrize(
    "directive,argv,option",
    [
        pytest.param("--mem=4G", ["--mem-per-cpu=1G"], "--mem-per-cpu", id="mem-kinds-like-sbatch"),
        pytest.param("--gpus-per-node=2", ["-G", "4"], "-G", id="gpu-kinds"),
    ],
)
def test_exclusive_kinds_across_script_and_command_line(directive, argv, option):
    with pytest.raises(InvalidOption) as err:
        spec_of(argv, script=f"{SH}#SBATCH {directive}\n")
    assert err.value.option == option
    assert "given in the script" in err.value.accepted


def test_environment_memory_kind_yields_to_the_script():
    # sbatch: SBATCH_MEM_PER_CPU=3G with "#SBATCH --mem=1G" gives mem 1G, no error.
    sub = build_spec([], script_text=SH + "#SBATCH --mem=1G\n", script_path="x", environ={"SBATCH_MEM_PER_CPU": "3G"})
    assert (sub.spec.mem_per_node_mib, sub.spec.mem_per_cpu_mib) == (1024, None)


# --- the built spec -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "script_path,argv,name",
    [
        pytest.param("/home/u/train.sbatch", [], "train.sbatch", id="script-file-name"),
        pytest.param("train.sh", ["-J", "x"], "x", id="explicit"),
        pytest.param(None, [], "sbatch", id="stdin"),
        pytest.param("-", [], "sbatch", id="stdin-dash"),
    ],
)
def test_default_job_name(script_path, argv, name):
    assert spec_of(argv, script=SH, path=script_path).name == name


def test_wrap_runs_the_users_command_under_sh():
    spec = wrap().spec
    assert spec.command == ["/bin/sh", "-c", "true"]
    assert spec.name == "wrap"
    assert spec.script is None


def test_script_is_carried_with_its_arguments():
    text = SH + "#SBATCH -t 1\necho \"$@\"\n"
    spec = spec_of([], script=text, path="a/b.sh", args=["x y", "$(id)"])
    assert (spec.script, spec.script_path, spec.args) == (text, "a/b.sh", ["x y", "$(id)"])


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["--wrap", "true"], id="wrap-and-script"),
    ],
)
def test_wrap_and_script_conflict(argv):
    with pytest.raises(InvalidOption) as err:
        build_spec(argv, script_text=SH, script_path="x.sh")
    assert err.value.option == "--wrap"


def test_nothing_to_run_is_an_error():
    with pytest.raises(InvalidOption) as err:
        build_spec(["-t", "5"])
    assert err.value.option == "SCRIPT"


@pytest.mark.parametrize(
    "argv,nodes,nodes_max,ntasks",
    [
        pytest.param([], 1, None, 1, id="defaults"),
        pytest.param(["-N", "2"], 2, None, 2, id="one-task-per-node-by-default"),
        pytest.param(["-N", "2-4"], 2, 4, 2, id="node-range"),
        pytest.param(["-n", "8"], 1, None, 8, id="tasks"),
        pytest.param(["-N", "2", "--ntasks-per-node=4"], 2, None, 8, id="tasks-per-node"),
        pytest.param(["-w", "cpu[1-3]"], 3, None, 3, id="nodelist-grows-node-count"),
    ],
)
def test_node_and_task_counts(argv, nodes, nodes_max, ntasks):
    spec = wrap(*argv).spec
    assert (spec.nodes, spec.nodes_max, spec.ntasks) == (nodes, nodes_max, ntasks)


def test_fewer_tasks_than_nodes_shrinks_nodes_like_sbatch():
    sub = wrap("-n", "1", "-N", "2")
    assert (sub.spec.nodes, sub.spec.ntasks) == (1, 1)
    assert any("setting --nodes to 1" in w for w in sub.warnings)


def test_output_none_is_dev_null_and_patterns_are_verbatim():
    spec = wrap("-o", "none", "-e", "logs/%x-%A_%a.%j.err").spec
    assert spec.stdout == "/dev/null"
    assert spec.stderr == "logs/%x-%A_%a.%j.err"


def test_submission_flags():
    sub = wrap("--parsable", "--dry-run", "--json")
    assert (sub.parsable, sub.dry_run, sub.json) == (True, True, True)
    assert wrap("--test-only").dry_run
    assert not wrap().parsable


def test_qos_and_priority_class_name_the_same_thing():
    assert wrap("-q", "inference").spec.priority_class == "inference"
    assert wrap("--priority-class", "training").spec.priority_class == "training"


def test_crossdock_placement_options():
    spec = wrap("--backend", "k8s", "--pool", "a100", "--placement", "spread", "--queue", "training", "-p", "gpu").spec
    assert (spec.backend, spec.pool, spec.placement, spec.queue, spec.partition) == (
        "k8s",
        "a100",
        "spread",
        "training",
        "gpu",
    )


def test_max_array_size_is_passed_through():
    assert wrap("-a", "0-1500", max_array_size=2000).spec.array.task_ids[-1] == 1500
    with pytest.raises(InvalidOption):
        wrap("-a", "0-1500")


# --- verbatim text --------------------------------------------------------------------------

_NASTY = ["it's \"quoted\"", "$(rm -rf /)", "`id`", "line1\nline2", "ünï¢ødé ✓", "; echo pwned", "a\\b", "*"]


@pytest.mark.parametrize("text", _NASTY)
def test_names_and_arguments_are_verbatim(text):
    spec = spec_of(["-J", text], script=SH, args=[text, "--", "-t"])
    assert spec.name == text
    assert spec.args == [text, "--", "-t"]
    assert wrap("-J", text).spec.name == text
    assert build_spec(["--wrap", text]).spec.command == ["/bin/sh", "-c", text]


@given(st.text(alphabet=st.characters(blacklist_characters="\0", blacklist_categories=("Cs",))))
def test_any_job_name_is_carried_verbatim(name):
    assert build_spec(["--job-name", name, "--wrap", "true"]).spec.name == name


# --- dry-run JSON ---------------------------------------------------------------------------

REQUIRED = {
    "name", "time_limit_seconds", "cpus_per_task", "ntasks", "nodes", "mem_per_node_mib", "mem_per_cpu_mib",
    "gres", "gpus", "array", "dependency", "nice", "hold",
}


def test_dry_run_json_full_example():
    script = (
        SH
        + "#SBATCH -J train -t 1:30 --mem 1K\n"
        + "#SBATCH -a 0-15:4%2 -d afterok:12:13_2,after:5+10\n"
        + "#SBATCH --gres=gpu:a100:2 -c 4 --nice=10 -H\n"
        + "#SBATCH -o out-%j.log --export=ALL,FOO=bar -w node[1-2] -x node3\n"
    )
    sub = build_spec(["-t", "2-0", "-q", "training"], script_text=script, script_path="/x/train.sh", script_args=["1"])
    out = dry_run_json(sub.spec)
    assert REQUIRED <= set(out)
    assert json.loads(json.dumps(out)) == out
    assert out["name"] == "train"
    assert out["time_limit_seconds"] == 2880 * 60
    assert (out["cpus_per_task"], out["ntasks"], out["nodes"]) == (4, 2, 2)
    assert (out["mem_per_node_mib"], out["mem_per_cpu_mib"]) == (1, None)
    assert out["gres"] == [{"name": "gpu", "type": "a100", "count": 2}]
    assert out["gpus"] is None
    assert out["array"] == {"task_ids": [0, 4, 8, 12], "max_running": 2}
    assert out["dependency"] == {
        "combine": "AND",
        "deps": [
            {"type": "afterok", "job_id": 12, "array_task": None, "delay_minutes": None},
            {"type": "afterok", "job_id": 13, "array_task": 2, "delay_minutes": None},
            {"type": "after", "job_id": 5, "array_task": None, "delay_minutes": 10},
        ],
    }
    assert (out["nice"], out["hold"]) == (10, True)
    assert (out["qos"], out["output"], out["error"]) == ("training", "out-%j.log", None)
    assert (out["export"], out["env"]) == ("ALL", {"FOO": "bar"})
    assert (out["nodelist"], out["exclude"]) == (["node1", "node2"], ["node3"])
    assert (out["script_path"], out["args"], out["command"]) == ("/x/train.sh", ["1"], None)


@pytest.mark.parametrize(
    "argv,key,value",
    [
        pytest.param(["-t", "1:30"], "time_limit_seconds", 120, id="mm:ss"),
        pytest.param(["-t", "2-0"], "time_limit_seconds", 2880 * 60, id="d-hh"),
        pytest.param(["-t", "0"], "time_limit_seconds", None, id="no-limit"),
        pytest.param(["--mem", "1K"], "mem_per_node_mib", 1, id="mem-k"),
        pytest.param(["--mem", "0"], "mem_per_node_mib", 0, id="mem-whole-node"),
        pytest.param(["--mem-per-cpu", "2G"], "mem_per_cpu_mib", 2048, id="mem-per-cpu"),
        pytest.param(["--gres=gpu:2"], "gpus", None, id="gres-leaves-gpus-null"),
        pytest.param(["--gres=gpu:2"], "gres", [{"name": "gpu", "type": None, "count": 2}], id="gres"),
        pytest.param(["-G", "2"], "gpus", {"count": 2, "type": None, "per": "job"}, id="gpus-job"),
        pytest.param(["--gpus-per-node=a100:8"], "gpus", {"count": 8, "type": "a100", "per": "node"}, id="gpus-node"),
        pytest.param(["--gpus-per-task=1"], "gpus", {"count": 1, "type": None, "per": "task"}, id="gpus-task"),
        pytest.param(["-a", "1,3,5-7"], "array", {"task_ids": [1, 3, 5, 6, 7], "max_running": None}, id="array"),
        pytest.param(
            ["-d", "afterok:1?afternotok:1"],
            "dependency",
            {
                "combine": "OR",
                "deps": [
                    {"type": "afterok", "job_id": 1, "array_task": None, "delay_minutes": None},
                    {"type": "afternotok", "job_id": 1, "array_task": None, "delay_minutes": None},
                ],
            },
            id="dependency-or",
        ),
        pytest.param(["--nice"], "nice", 100, id="nice-default"),
        pytest.param([], "hold", False, id="not-held"),
        pytest.param(["--no-requeue"], "requeue", False, id="no-requeue"),
        pytest.param(["--exclusive"], "exclusive", True, id="exclusive"),
        pytest.param(["-D", "/tmp/w"], "chdir", "/tmp/w", id="chdir"),
        pytest.param([], "name", "wrap", id="wrap-name"),
    ],
)
def test_dry_run_json_fields(argv, key, value):
    assert dry_run_json(wrap(*argv).spec)[key] == value


# --- SBATCH_* input environment variables ---------------------------------------------------


def test_environment_sits_between_script_and_command_line():
    script = SH + "#SBATCH -t 10 -p from-script -J s\n"
    env = {"SBATCH_TIMELIMIT": "20", "SBATCH_PARTITION": "from-env", "HOME": "/h"}
    spec = build_spec(["-t", "30"], script_text=script, script_path="x.sh", environ=env).spec
    assert spec.time_limit_seconds == 30 * 60  # command line beats the environment
    assert spec.partition == "from-env"  # the environment beats the script
    assert spec.name == "s"


@pytest.mark.parametrize(
    "env,key,value",
    [
        pytest.param({"SBATCH_MEM_PER_NODE": "2G"}, "mem_per_node_mib", 2048, id="mem"),
        pytest.param({"SBATCH_GPUS": "a100:2"}, "gpus", {"count": 2, "type": "a100", "per": "job"}, id="gpus"),
        pytest.param({"SBATCH_ARRAY_INX": "1-3%1"}, "array", {"task_ids": [1, 2, 3], "max_running": 1}, id="array"),
        pytest.param({"SBATCH_NO_REQUEUE": "1"}, "requeue", False, id="flag"),
        pytest.param({"SBATCH_EXCLUSIVE": ""}, "exclusive", True, id="optional-empty"),
        pytest.param({"SBATCH_CONSTRAINT": "a100"}, "name", "wrap", id="unsupported-variable-left-alone"),
    ],
)
def test_environment_variables(env, key, value):
    assert dry_run_json(wrap(environ=env).spec)[key] == value


def test_bad_environment_variable_is_named():
    with pytest.raises(InvalidOption) as err:
        wrap(environ={"SBATCH_TIMELIMIT": "soon"})
    assert (err.value.option, err.value.value) == ("SBATCH_TIMELIMIT", "soon")


# --- robustness -----------------------------------------------------------------------------

_WORDS = st.one_of(
    st.sampled_from(
        ["-t", "--time=1:30", "-c", "0", "4", "-N", "2-1", "--mem", "1K", "--mem-per-cpu=2G", "-G", "a100:2",
         "--gpus-per-node", "-a", "0-15:4%2", "-d", "afterok:1?after:2", "-w", "n[1-3]", "-x", "n2", "--nice",
         "--nice=7", "-H", "--export", "ALL,A=1", "-o", "none", "--", "-", "--exclusive", "--gres", "gpu:0",
         "-n", "1", "--ntasks-per-node=3", "-J", "", "--wrap", "x", "script.sh", "-Hc", "--par", "-Z",
         "-C", "a&[b|c]", "--signal", "B:USR1@5", "-b", "now+1hour", "--deadline=now", "--mem-per-gpu=1G",
         "--cpus-per-gpu", "2", "--ntasks-per-gpu=1", "-L", "a:2", "-M", "--get-user-env", "--time-min=1",
         "--dependency=", "-a", "[0-3]", "-d", "afterok:1_[1-2]"]
    ),
    st.text(max_size=12),
)


@given(st.lists(_WORDS, max_size=12))
def test_any_argv_gives_a_spec_or_invalid_option(argv):
    try:
        sub = build_spec(["--wrap", "true", *argv])
    except InvalidOption as exc:
        lines = getattr(exc, "errors", [exc])
        assert all("\n" not in str(e) for e in lines) and str(exc).count("\n") == len(lines) - 1
        return
    out = dry_run_json(sub.spec)
    assert json.loads(json.dumps(out)) == out


@given(st.lists(st.one_of(st.sampled_from(["#SBATCH ", "#SBATCH", "# x", "", "echo", " #SBATCH -t 1"]), _WORDS), max_size=8))
def test_any_script_gives_a_spec_or_invalid_option(lines):
    script = SH + "\n".join(lines) + "\n"
    try:
        build_spec([], script_text=script, script_path="s.sh")
    except InvalidOption:
        pass


def test_an_escaped_blank_is_refused_with_how_to_quote_it():
    # sbatch 22.05 refuses `#SBATCH -J a\ b` too ("Invalid directive found in batch script: b")
    with pytest.raises(InvalidDirective, match=r"line 2: .*'b'.*backslash does not keep a blank.*-J \"a b\""):
        build_spec([], SH + "#SBATCH -J a\\ b\ntrue\n")
    assert build_spec([], SH + '#SBATCH -J "a b" -o \'x y\' --comment=a\\"b\ntrue\n').spec.name == "a b"


@pytest.mark.parametrize("argv", [["-c", "١٢"], ["-c", "²"], ["-n", "9" * 5000], ["-t", "٣٠"], ["--mem", "١G"],
                                  ["-a", "0-٣"], ["--nice=١"], ["-N", "9" * 30], ["-d", "afterok:١"]],
                         ids=["arabic", "superscript", "5000-digits", "time", "mem", "array", "nice", "nodes", "dep"])
def test_numbers_are_ascii_digits_that_fit(argv):
    with pytest.raises(InvalidOption):
        build_spec([*argv, "--wrap", "true"])
