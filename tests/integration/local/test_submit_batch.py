"""``crossdock submit --batch``: many submissions per call, all or nothing."""

from __future__ import annotations

import pytest

from test_cli import cli  # noqa: E402  (tests/integration/local is on the path, as for the other local tests)

pytestmark = pytest.mark.redis


def test_a_batch_stores_every_line_in_order_with_common_options(crossdock_env, store, tmp_path):
    script = tmp_path / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -t 5\necho \"$@\"\n")
    batch = tmp_path / "batch.txt"
    batch.write_text(f"# one submission per line\n{script} 'two words' b\n\n--wrap='echo x' -c 2\n"
                     f"-J sweep --array=0-2 {script}\n")
    r = cli(crossdock_env, "submit", "--batch", str(batch), "-c", "3", "--hold", cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    firsts = [int(line.removeprefix("Submitted batch job ")) for line in r.stdout.splitlines()]
    assert len(firsts) == 3
    plain, wrap, array = store.get(firsts[0]), store.get(firsts[1]), store.get_many(store.resolve(str(firsts[2])))
    assert plain.spec.args == ["two words", "b"] and plain.spec.time_limit_seconds == 300
    assert plain.spec.cpus_per_task == 3 and plain.spec.hold  # the common options
    assert wrap.spec.command == ["/bin/sh", "-c", "echo x"] and wrap.spec.cpus_per_task == 2  # the line's own win
    assert [j.array_task_id for j in array] == [0, 1, 2] and {j.spec.name for j in array} == {"sweep"}


def test_a_batch_with_any_bad_line_stores_nothing_and_names_every_line(crossdock_env, store, tmp_path):
    before = store.r.get(store.k.job_counter)
    lines = "--wrap=true\n-t soon --wrap=true\n--wrap=true --bogus\n'unclosed --wrap=true\n--mem=1000000G --wrap=true\n"
    r = cli(crossdock_env, "submit", "--batch", "-", stdin=lines)
    assert r.returncode == 2
    errors = r.stderr.strip().splitlines()
    assert [e.split(":")[2].strip() for e in errors[:-1]] == ["line 2", "line 3", "line 4"], r.stderr
    assert errors[-1].startswith("crossdock: error: nothing submitted")
    assert "Traceback" not in r.stderr and store.pending_ids() == []
    # the lines parse but one cannot be admitted: that line is named, nothing stored either
    r = cli(crossdock_env, "submit", "--batch", "-", stdin="--wrap=true\n--mem=1000000G --wrap=true\n")
    assert r.returncode == 2 and "line 2: --mem" in r.stderr, r.stderr
    assert store.r.get(store.k.job_counter) == before and store.pending_ids() == []


def test_parsable_prints_ids_only(crossdock_env, store):
    r = cli(crossdock_env, "submit", "--batch", "-", "--parsable", stdin="--wrap=true\n--wrap=false\n")
    assert r.returncode == 0, r.stderr
    ids = [int(x) for x in r.stdout.split()]
    assert len(ids) == 2 and ids[1] == ids[0] + 1
