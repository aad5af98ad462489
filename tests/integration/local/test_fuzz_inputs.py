"""Random input through every face: the CLI (submit and --dry-run), the config (config check) and
the Python API, against a real Redis with a test prefix.

Every input ends one of two ways: accepted (exit 0, or a job handle), or refused (exit 2 with
one line per problem on stderr, or a typed CrossdockError); a refusal stores nothing (the pending
index and the id counter unchanged), nothing ends in a traceback, and what is accepted is
something the scheduler can evaluate (never set aside as InvalidSpec). Each target prints its
counts: inputs tried, refused, accepted, tracebacks (asserted 0)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections import Counter
from datetime import datetime, timezone

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from crossdock.cli import common
from crossdock.cli.main import app
from crossdock.queue.cycle import run_cycle
from crossdock.queue.errors import CrossdockError
from crossdock.queue.sbatch import OPTIONS
from crossdock.queue.snapshot import Snapshot
from crossdock.queue.states import Reason
from tests.conftest import TEST_CONFIG

pytestmark = pytest.mark.redis
FUZZ = settings(max_examples=200, deadline=None, database=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


def _undecodable(data: bytes) -> str:
    """Bytes as a non-UTF-8 argv or file name reaches Python: surrogate-escaped."""
    return data.decode("utf-8", "surrogateescape")


# values that have broken parsers before: huge and negative numbers, non-ASCII digits, bytes
# that are not UTF-8, control characters, a 1 MB name, Slurm's own spellings
NASTY = st.sampled_from([
    "0", "-1", "1", "4", "99999999999999999999", "9" * 5000, "1000000000-0", "365-00:00:01", "INFINITE",
    "١٢", "²", "1.5", "1e9", "nan", "inf", "", " ", "\n", "a\nb", "\x00", "%", "::", "gpu:a100:2", "gpu:0",
    "garbage", "nosuchnode", "localhost", "node[1-99999999]", "A100:1", "afterok:1", "0-1000000000",
    "0-3%0", "1T", "1P", "4G", "gpu:1P", "gpu:a100:99999999", "99999999", "afterok:999999999999999999",
    "after:1+99999999999", "0-3%99999999999", "1-99999999", "2k-3m", "ALL", "NONE", "a" * 2000, "a" * (1 << 20), "binpack", "spread",
    _undecodable(b"\xff\xfe"), _undecodable(b"caf\xe9"),
])
PLAUSIBLE = st.sampled_from(["1", "2", "10", "1:00", "0-3", "2G", "500", "training", "inference", "local", "localhost",
                             "a100:1", "job", "%j.out", "ALL", "/tmp"])
VALUES = st.one_of(NASTY, PLAUSIBLE, PLAUSIBLE, st.text(max_size=30), st.integers(-2**70, 2**70).map(str),
                   st.binary(max_size=12).map(_undecodable))
NAMES = [f"--{o.long}" for o in OPTIONS if o.long not in ("dry-run", "test-only")] + \
        [f"-{o.short}" for o in OPTIONS if o.short] + ["--bogus", "--constraint", "-", "--"]


@st.composite
def submit_argv(draw) -> list[str]:
    argv: list[str] = []
    for _ in range(draw(st.integers(0, 5))):
        name = draw(st.sampled_from(NAMES))
        if draw(st.booleans()):
            argv.append(f"{name}={draw(VALUES)}" if name.startswith("--") else name + draw(VALUES))
        else:
            argv += [name, draw(VALUES)]
    argv += draw(st.sampled_from([["--wrap", "true"], ["--wrap", draw(VALUES)], [], ["/nonexistent.sh"]]))
    return argv


class Outcomes:
    def __init__(self, target: str):
        self.target, self.n = target, Counter()

    def report(self) -> None:
        n = self.n
        print(f"\nfuzz {self.target}: {n['tried']} inputs tried, {n['refused']} refused, {n['accepted']} accepted,"
              f" {n['tracebacks']} tracebacks")
        assert n["tracebacks"] == 0 and n["tried"] == n["refused"] + n["accepted"]


def stored(store) -> tuple:
    return store.pending_count(), store.r.get(store.k.job_counter)


def evaluable(rt, jobs) -> None:
    """What was accepted, the scheduler can evaluate: no InvalidSpec in a cycle over the config's nodes."""
    from crossdock.service import load_inventory

    result = run_cycle(Snapshot(nodes=tuple(load_inventory(rt))), jobs, rt.config, datetime.now(timezone.utc))
    assert Reason.INVALID_SPEC not in result.pending.values(), result.explanations


@pytest.fixture
def cli(crossdock_env, store):
    common.runtime.cache_clear()  # the CLI's runtime is per process; each test has its own prefix
    yield CliRunner()
    common.runtime.cache_clear()


def run_cli(cli, outcomes: Outcomes, store, argv: list[str]):
    before = stored(store)
    r = cli.invoke(app, argv, input="")
    outcomes.n["tried"] += 1
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        outcomes.n["tracebacks"] += 1
        raise AssertionError(f"{argv!r} raised {r.exception!r}") from r.exception
    assert r.exit_code in (0, 2), (argv, r.exit_code, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    if r.exit_code == 2:
        outcomes.n["refused"] += 1
        # every problem at once, one line each (sbatch's habit of stopping at the first is not kept)
        lines = [line for line in r.stderr.splitlines() if not line.startswith("crossdock: warning: ")]
        assert lines and all(line.startswith("crossdock: error: ") for line in lines), (argv, r.stderr)
        assert stored(store) == before, argv
    else:
        outcomes.n["accepted"] += 1
    return r


def test_fuzz_cli_submit_and_dry_run(cli, store, runtime):
    outcomes = Outcomes("cli submit/--dry-run")

    @FUZZ
    @given(argv=submit_argv(), dry=st.booleans())
    def one(argv, dry):
        before = stored(store)
        r = run_cli(cli, outcomes, store, ["submit", *(["--dry-run"] if dry else []), *argv])
        if r.exit_code == 0 and dry:
            assert stored(store) == before  # a dry run stores nothing, accepted or not
        elif r.exit_code == 0:
            new = store.get_many(store.pending_ids())
            evaluable(runtime, new)
            for j in new:  # keep the pending index small; the counter moved, and that is what was stored
                store.cancel(j.id)
        # --dry-run refuses what submit refuses: the same argv, the other way
        other = cli.invoke(app, ["submit", *([] if dry else ["--dry-run"]), *argv], input="")
        if other.exit_code == 0 and not dry:
            for j in store.get_many(store.pending_ids()):
                store.cancel(j.id)
        assert other.exit_code == r.exit_code, (argv, r.stderr, other.stderr)

    one()
    outcomes.report()


@pytest.mark.parametrize("refs", [["١٢"], ["²"], ["12_١"], [_undecodable(b"\xff")], ["9" * 40], ["-1"], [""], ["1_"]])
@pytest.mark.parametrize("command", ["show", "cancel", "hold", "release", "requeue", "wait", "logs"])
def test_job_ids_in_every_command_are_ascii_digits(cli, store, command, refs):
    outcomes = Outcomes(f"{command} ids")
    r = run_cli(cli, outcomes, store, [command, *refs])
    assert r.exit_code == 2 and ("no such job" in r.stderr or "No such option: -1" in r.stderr), r.stderr


# --- config ---------------------------------------------------------------------------------

SCALARS = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=True),
                    st.text(max_size=8), st.sampled_from([10**30, 1e-4, float("inf"), "local", "binpack"]))
TREES = st.recursive(SCALARS, lambda kids: st.one_of(st.lists(kids, max_size=3),
                                                     st.dictionaries(st.text(max_size=6), kids, max_size=3)),
                     max_leaves=8)
PATHS = st.sampled_from([
    ("pools", "local", "nodes", 0, "cpus"), ("pools", "local", "nodes", 0, "memory_mib"),
    ("pools", "local", "nodes", 0, "gpus"), ("pools", "local", "nodes"), ("pools", "local", "backend"),
    ("pools", "local", "backend_queue"), ("scheduler", "lease_seconds"), ("scheduler", "interval_seconds"),
    ("scheduler", "fairshare_half_life_minutes"), ("scheduler", "kill_wait_seconds"),
    ("scheduler", "max_array_size"), ("scheduler",), ("queues",), ("pools",), ("priority_classes",),
    ("queues", "training", "placement"), ("queues", "training", "per_job", "cpu"), ("queues", "training", "weight"),
    ("queues", "training", "plugin_weights"), ("queues", "training", "quota"), ("queues", "training", "pools"),
    ("priority_classes", "training", "value"), ("priority_classes", "training", "grace_seconds"), ("default_queue",),
])


def _with(base: dict, path: tuple, value) -> dict:
    import copy

    data = copy.deepcopy(base)
    node = data
    for key in path[:-1]:
        node = node[key] if isinstance(node, dict) else node[key]
    node[path[-1]] = value
    return data


def test_fuzz_config_check(cli, tmp_path):
    outcomes = Outcomes("config check")
    path = tmp_path / "fuzzed.yaml"

    @FUZZ
    @given(data=st.one_of(TREES, st.tuples(PATHS, st.one_of(SCALARS, TREES)).map(lambda pv: _with(TEST_CONFIG, *pv))))
    def one(data):
        path.write_text(yaml.safe_dump(data, allow_unicode=True))
        r = cli.invoke(app, ["config", "check", str(path)])
        outcomes.n["tried"] += 1
        if r.exception is not None and not isinstance(r.exception, SystemExit):
            outcomes.n["tracebacks"] += 1
            raise AssertionError(f"{data!r} raised {r.exception!r}") from r.exception
        assert r.exit_code in (0, 2), (data, r.stderr)
        if r.exit_code == 2:
            outcomes.n["refused"] += 1
            named = re.compile(rf"{re.escape(str(path))}:(\d+:)? ")  # the file, with the line of the problem
            assert r.stderr and all(named.match(line) for line in r.stderr.splitlines()), r.stderr
            return
        outcomes.n["accepted"] += 1
        # what config check accepts, the service runs: the same load, a cycle with a job per queue
        from crossdock.backends.registry import catalog
        from crossdock.configfile import load_config
        from crossdock.queue.probe import dry_cycle

        cfg = load_config(path, catalog())
        assert cfg.scheduler.interval_seconds <= cfg.scheduler.lease_seconds / 2
        from crossdock.backends.local import gpus
        from crossdock.backends.local.backend import local_nodes

        assert dry_cycle(cfg, local_nodes(cfg, gpus.discover()), datetime.now(timezone.utc)) == []

    one()
    outcomes.report()


# --- the Python API -------------------------------------------------------------------------

API_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(), st.text(max_size=6),
                       st.sampled_from(["4G", "1.9", "1:00:00", "١٢", _undecodable(b"\xff"), 10**30, 1.9, [], ["ls"]]))
API_KEYS = st.sampled_from(["cpus", "mem", "gpus", "gpu_model", "time_limit", "nodes", "ntasks", "queue", "name",
                            "placement", "nodelist", "nice", "cpu", "priority_class", "hold"])
ARGVS = st.one_of(st.just(["true"]), st.just("ls -l"), st.just(""), st.just([]), st.just("'open"),
                  st.lists(st.one_of(st.text(max_size=5), st.integers()), max_size=3), API_VALUES)


def test_fuzz_python_api(crossdock_env, store, runtime):
    from crossdock import Client

    client = Client(runtime)
    outcomes = Outcomes("python api")

    @FUZZ
    @given(argv=ARGVS, kwargs=st.dictionaries(API_KEYS, API_VALUES, max_size=4))
    def one(argv, kwargs):
        before = stored(store)
        outcomes.n["tried"] += 1
        try:
            handle = client.submit_command(argv, **kwargs)
        except CrossdockError as exc:  # InvalidArgument is also a ValueError; InvalidJob names the option
            outcomes.n["refused"] += 1
            assert "\n" not in str(exc), str(exc)
            assert stored(store) == before, (argv, kwargs)
            return
        except Exception as exc:
            outcomes.n["tracebacks"] += 1
            raise AssertionError(f"submit_command({argv!r}, **{kwargs!r}) raised {exc!r}") from exc
        outcomes.n["accepted"] += 1
        evaluable(runtime, [handle.job])
        store.cancel(handle.id)

    one()
    outcomes.report()


def test_submit_command_splits_a_string_and_mem_follows_slurm(crossdock_env, store, runtime):
    from crossdock import Client, InvalidArgument

    client = Client(runtime)
    job = client.submit_command("ls -l '/tmp/a b'", mem="2G", hold=True).job
    assert (job.spec.command, job.spec.mem_per_node_mib) == (["ls", "-l", "/tmp/a b"], 2048)
    with pytest.raises(InvalidArgument, match=r"mem: 1.9 is not a whole number of MiB.*'1.9G'"):
        client.submit_command(["true"], mem=1.9)
    with pytest.raises(InvalidArgument, match="argv: the command is empty"):
        client.submit_command([])
    assert issubclass(InvalidArgument, ValueError)


# --- real bytes, through a real process -----------------------------------------------------

BYTES_CASES = {
    "name": [b"-J", b"\xff\xfe", b"--wrap", b"true"],
    "command": [b"--wrap", b"echo \xe9"],
    "output": [b"-o", b"/tmp/out-\xff", b"--wrap", b"true"],
    "chdir": [b"-D", b"/tmp/\xff", b"--wrap", b"true"],
    "script-path": [b"/tmp/nonexistent-\xff.sh"],
    "arabic-digits": [b"-c", "\u0661\u0662".encode(), b"--wrap", b"true"],
}


@pytest.mark.parametrize("dry", [True, False], ids=["dry-run", "submit"])
@pytest.mark.parametrize("argv", BYTES_CASES.values(), ids=BYTES_CASES.keys())
def test_non_utf8_argv_is_one_line_in_a_real_process(crossdock_env, store, argv, dry):
    before = stored(store)
    cmd = [os.fsencode(sys.executable), b"-m", b"crossdock", b"submit", *([b"--dry-run"] if dry else []), *argv]
    r = subprocess.run(cmd, env={**os.environ, **crossdock_env}, capture_output=True, timeout=60)
    err = r.stderr.decode(errors="replace")
    assert r.returncode == 2 and len(err.splitlines()) == 1 and err.startswith("crossdock: error: "), err
    assert stored(store) == before


def test_non_utf8_script_is_one_line(crossdock_env, store, tmp_path):
    script = tmp_path / "latin1.sh"
    script.write_bytes(b"#!/bin/sh\n#SBATCH -J caf\xe9\necho hi\n")
    before = stored(store)
    r = subprocess.run([sys.executable, "-m", "crossdock", "submit", str(script)], env={**os.environ, **crossdock_env},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.splitlines() == [
        f"crossdock: error: SCRIPT: {script} is not UTF-8 text (byte 0xe9 at offset 24); save it as UTF-8"], r.stderr
    assert stored(store) == before


@pytest.mark.parametrize("command", [["submit", "--wrap", "true"], ["submit", "--dry-run", "--wrap", "true"],
                                     ["info"], ["queue"], ["show", "1"], ["cancel", "1"]])
@pytest.mark.parametrize("config", ["missing", "yaml", "values", "latin1"])
def test_a_broken_config_is_one_line_in_every_command(crossdock_env, tmp_path, command, config):
    path = tmp_path / "broken.yaml"
    if config == "latin1":
        path.write_bytes(b"queues: {caf\xe9: {}}\n")
    elif config == "yaml":
        path.write_text("queues: {training: [\n")
    elif config == "values":
        path.write_text(yaml.safe_dump(_with(TEST_CONFIG, ("scheduler", "lease_seconds"), float("inf"))))
    env = {**os.environ, **crossdock_env, "CROSSDOCK_CONFIG": str(path)}
    r = subprocess.run([sys.executable, "-m", "crossdock", *command], env=env, capture_output=True, text=True, timeout=60)
    lines = r.stderr.splitlines()
    assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(f"crossdock: error: config {path}"), r.stderr


def test_dry_run_refuses_what_submit_refuses_without_starting_redis(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSDOCK_")}
    env["CROSSDOCK_STATE_DIR"] = str(tmp_path / "state")  # no Redis there, embedded or given
    for args, code in [(["--wrap", "true"], 0), (["-w", "nosuchnode", "--wrap", "true"], 2),
                       (["--placement", "garbage", "--wrap", "true"], 2), (["-t", "1000000000-0", "--wrap", "true"], 2)]:
        r = subprocess.run([sys.executable, "-m", "crossdock", "submit", "--dry-run", "--json", *args], env=env,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == code, (args, r.stderr)
        assert code == 0 or len(r.stderr.splitlines()) == 1, r.stderr
    assert not (tmp_path / "state").exists()  # the embedded Redis was never started
