"""How the suite runs on pytest-xdist workers (scripts/test.sh: ``-n 4 --dist loadgroup``).

Tests that share one cluster run on one worker, one at a time, in collection order, as in a
serial run; every other test runs on any worker (each has its own Redis, state directory, key
prefix and ports). The groups come from markers and fixtures (:func:`group_of`), so a new test
marked ``slurm`` or ``kubernetes``, or using their fixtures, is grouped without doing anything.

xdist's own ``loadgroup`` reads a group from a suffix it appends to each node id, which pytest
9.2's structured node ids ignore (pytest-dev/pytest-xdist#1386). So each worker writes the groups
of what it collected to a file (:func:`record`) and the controller's scheduler reads them
(:func:`scheduler`): no node id is changed. An ``xdist_group`` marker still names a group.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import pytest

SHARED = (
    ("slurm", {"slurm"}, {"slurm_cluster"}),
    ("kubernetes", {"kubernetes"}, {"k8s_kubeconfig", "k8s_client", "k8s_namespace"}),
    ("chaos", {"chaos"}, set()),
)
"""(group, markers, fixtures): the first rule a test's markers or fixtures match names its group.
The local Slurm cluster (its nodes and partitions, preemption on cpu1, power saving, a controller
restart) and the shared Kubernetes plane (the kwok nodes' capacity, an API server restart) serve
one test at a time; the chaos run's leases and kills keep a worker to themselves."""

OWN_PLANE = ("kubernetes-own-plane", "k8s_binaries")
"""A Kubernetes test that starts a plane of its own (free ports, its own directory) and uses no
shared-plane fixture: apart from the shared plane, one such test at a time (each is heavy)."""

GROUPS_DIR = "CROSSDOCK_XDIST_GROUPS"
"""The environment variable naming the directory where the workers write their groups."""


def group_of(item: pytest.Item) -> str | None:
    """The group ``item`` runs in, None for any worker."""
    named = sorted({str(m.args[0] if m.args else m.kwargs.get("name", "default"))
                    for m in item.iter_markers("xdist_group")})
    if named:
        return "_".join(named)
    markers = {m.name for m in item.iter_markers()}
    fixtures = set(item.fixturenames)
    if OWN_PLANE[1] in fixtures and not fixtures & SHARED[1][2]:
        return OWN_PLANE[0]
    for group, marks, uses in SHARED:
        if markers & marks or fixtures & uses:
            return group
    return None


def distributing(config: pytest.Config) -> bool:
    """This is the controller of a ``--dist loadgroup`` run."""
    return not hasattr(config, "workerinput") and config.getoption("dist", "no") == "loadgroup"


def configure(config: pytest.Config) -> None:
    """On the controller, before the workers start: the directory they write their groups to."""
    if distributing(config):
        os.environ[GROUPS_DIR] = tempfile.mkdtemp(prefix="crossdock-xdist-")


def record(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a worker, once collected: ``{node id: group}`` of the grouped items, for the scheduler."""
    where = os.environ.get(GROUPS_DIR)
    if not hasattr(config, "workerinput") or not where:
        return
    groups = {item.nodeid: group for item in items if (group := group_of(item))}
    final = Path(where) / f"{config.workerinput['workerid']}.json"
    partial = final.with_suffix(".part")
    partial.write_text(json.dumps(groups))
    partial.replace(final)


def finish(config: pytest.Config) -> None:
    if distributing(config) and os.environ.get(GROUPS_DIR):
        shutil.rmtree(os.environ[GROUPS_DIR], ignore_errors=True)


TIMES = "CROSSDOCK_TEST_TIMES"
"""The environment variable naming a file for every test's time (seconds, CPU seconds of its
worker and the children it reaped, group, node id; the slowest first), written at the end of a
distributed run: what to shorten to keep CI in its time."""

RECORDED: dict[str, str] = {}
"""On the controller, once the scheduler has read them: the workers' ``{node id: group}``."""


_CPU_AT = pytest.StashKey[float]()


def _cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def cpu(item: pytest.Item, report: pytest.TestReport) -> None:
    """On a worker, each phase's report carries the CPU seconds the worker and the children it
    reaped spent in it (``cpu_s``): what a test costs the machine, which lengthens the others."""
    now = _cpu_seconds()
    start = now if report.when == "setup" else item.stash.get(_CPU_AT, now)
    item.stash[_CPU_AT] = now
    report.user_properties.append(("cpu_s", round(now - start, 3)))


def summary(terminalreporter) -> None:
    """The time each group took (setup, call and teardown of its tests, summed): a group runs on
    one worker, so the longest is the least the suite can take however many workers run it. Then
    the time each worker was busy, and (``CROSSDOCK_TEST_TIMES``) every test's time and CPU."""
    if not distributing(terminalreporter.config):
        return
    seconds: dict[str, float] = {}
    tests: dict[str, set[str]] = {}
    each: dict[str, float] = {}
    used: dict[str, float] = {}
    busy: dict[str, float] = {}
    for reports in terminalreporter.stats.values():
        for report in reports:
            if isinstance(report, pytest.TestReport):
                group = RECORDED.get(report.nodeid, "(any worker)")
                seconds[group] = seconds.get(group, 0.0) + report.duration
                tests.setdefault(group, set()).add(report.nodeid)
                each[report.nodeid] = each.get(report.nodeid, 0.0) + report.duration
                used[report.nodeid] = used.get(report.nodeid, 0.0) + dict(report.user_properties).get("cpu_s", 0.0)
                worker = getattr(getattr(getattr(report, "node", None), "gateway", None), "id", "?")
                busy[worker] = busy.get(worker, 0.0) + report.duration
    terminalreporter.write_sep("=", "time per group (a group runs on one worker)")
    for group, total in sorted(seconds.items(), key=lambda kv: -kv[1]):
        terminalreporter.write_line(f"{total:8.1f}s {group} ({len(tests[group])} tests)")
    terminalreporter.write_line("time per worker (balanced when close): "
                                + ", ".join(f"{w} {t:.0f}s" for w, t in sorted(busy.items())))
    if where := os.environ.get(TIMES):
        rows = sorted(each.items(), key=lambda kv: -kv[1])
        Path(where).parent.mkdir(parents=True, exist_ok=True)
        Path(where).write_text("seconds\tcpu_seconds\tgroup\ttest\n" + "".join(
            f"{t:.2f}\t{used.get(n, 0.0):.2f}\t{RECORDED.get(n, '-')}\t{n}\n" for n, t in rows))
        terminalreporter.write_line(f"every test's time: {where}")


def scheduler(config: pytest.Config, log):
    """xdist's loadgroup scheduling over the groups the workers recorded."""
    if config.getoption("dist", "no") != "loadgroup":
        return None
    from xdist.scheduler import LoadGroupScheduling

    class RecordedGroups(LoadGroupScheduling):
        groups: dict[str, str] | None = None

        def _split_scope(self, nodeid: str) -> str:
            if self.groups is None:
                records = sorted(Path(os.environ[GROUPS_DIR]).glob("*.json"))
                if not records:
                    raise RuntimeError(f"no worker recorded its test groups in {os.environ[GROUPS_DIR]}"
                                       " (tests/parallel.py record)")
                self.groups = json.loads(records[0].read_text())
                RECORDED.update(self.groups)
            return self.groups.get(nodeid) or super()._split_scope(nodeid)

    return RecordedGroups(config, log)
