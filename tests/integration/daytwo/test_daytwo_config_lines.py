"""A refused config names the line of each problem, through every way an admin hands one over:
``crossdock config check FILE``, ``crossdock config apply FILE`` to a running ``crossdock up``, and
an edit of the file ``up`` watches. Each problem is one ``FILE:LINE: path: message`` line, all of
them at once, in the file's order, with no traceback; the config in force stays."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.daytwo.test_daytwo_live import cli, start_up  # noqa: F401 - start_up is a fixture
from tests.waiting import eventually

pytestmark = [pytest.mark.daytwo]

BAD = """\
priority_classes:
  inference: {value: 1000}
  training: {value: 100, preemptible: true}
pools:
  local:
    backend: local
    nodes:
      - name: localhost
        cpus: four
        memory_mib: 8192
queues:
  training:
    priority_class: training
    pools: [local, gpu]
  inference: {priority_class: inference, pools: [local], placment: spread}
"""


def problems(path: Path | str) -> list[str]:
    return [f"{path}:9: pools.local.nodes.0.cpus: Input should be a valid integer, unable to parse string as an"
            " integer (got 'four')",
            f"{path}:14: queues.training.pools.1: unknown pool 'gpu'; defined: local",
            f"{path}:15: queues.inference.placment: unknown field; remove it or check its spelling"]


def test_config_check_names_the_line_of_every_problem(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)
    r = subprocess.run([sys.executable, "-m", "crossdock.cli.main", "config", "check", str(bad)],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == problems(bad)
    assert r.stdout == ""


@pytest.mark.redis
@pytest.mark.celery
def test_config_apply_and_a_watched_edit_name_the_lines_and_keep_the_config_in_force(start_up, crossdock_env,
                                                                                     tmp_path):
    proc, rt = start_up(crossdock_env, workers=0)
    live, watched = rt.store.live_config, Path(crossdock_env["CROSSDOCK_CONFIG"])
    bad = tmp_path / "bad.yaml"
    bad.write_text(BAD)

    r = cli(crossdock_env, "config", "apply", str(bad))
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [*problems(bad.absolute()), f"{bad}: refused; the config in force stays"]
    assert (live.desired_version(), live.in_force_version()) == (1, 1)

    watched.write_text(BAD)  # up's own file: its watcher sees the new text and refuses it
    refused = eventually("the edit to be refused",
                         lambda: [e for e in live.events() if e["event"] == "config_refused"])
    assert refused[-1]["errors"].splitlines() == problems(watched)
    assert (live.desired_version(), live.in_force_version()) == (1, 1)
    assert proc.poll() is None
