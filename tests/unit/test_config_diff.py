"""diff_configs: what a live config change prints and records, by class, pool and queue."""

import copy

import pytest

from crossdock.queue.config import parse_config
from crossdock.queue.config_diff import diff_configs, reverted
from tests.conftest import TEST_CONFIG


def edited(edit):
    data = copy.deepcopy(TEST_CONFIG)
    edit(data)
    return parse_config(data)


def _weight(d):
    d["queues"]["training"]["weight"] = 3


def _pool(d):
    d["pools"]["extra"] = {"backend": "local", "nodes": [{"name": "extra-1", "cpus": 2, "memory_mib": 512}]}


def _queue_and_class(d):
    d["priority_classes"]["batch"] = {"value": 50, "preemptible": True}
    d["queues"]["batch"] = {"priority_class": "batch", "pools": ["local"]}
    del d["queues"]["inference"]


def _nested(d):
    d["queues"]["training"]["per_job"] = {"cpu": 16, "gpu": 4}
    d["queues"]["training"]["quota"] = {"gpu": 2}


def _settings(d):
    d["scheduler"]["interval_seconds"] = 0.5
    d["admins"] = ["alice"]


@pytest.mark.parametrize("edit, lines", [
    (lambda d: None, []),
    (_weight, ["queues.training: weight 1 → 3"]),
    (_pool, ["pools.extra: added (backend local)"]),
    (_queue_and_class, ["priority_classes.batch: added (value 50, preemptible)", "queues.inference: removed",
                        "queues.batch: added (class batch, pools local)"]),
    (_nested, ["queues.training: per_job.gpu 8 → 4; quota.gpu unset → 2"]),
    (_settings, ["scheduler: interval_seconds 0.2 → 0.5", 'admins: value [] → ["alice"]']),
], ids=["none", "weight", "new-pool", "queue-and-class", "nested-fields", "settings"])
def test_diff_lines(edit, lines):
    old = parse_config(copy.deepcopy(TEST_CONFIG))
    assert [str(c) for c in diff_configs(old, edited(edit))] == lines


def test_diff_is_json_with_old_and_new_values():
    old = parse_config(copy.deepcopy(TEST_CONFIG))
    [change] = diff_configs(old, edited(_weight))
    assert change.to_json() == {"path": "queues.training", "kind": "changed", "summary": "",
                                "fields": [{"field": "weight", "old": 1.0, "new": 3.0}]}


def test_reverse_diff_swaps_added_and_removed():
    old, new = parse_config(copy.deepcopy(TEST_CONFIG)), edited(_pool)
    assert [c.kind for c in diff_configs(new, old)] == ["removed"]


def _both(*edits):
    def edit(d):
        for e in edits:
            e(d)
    return edit


def _weight_back(d):
    d["queues"]["training"]["weight"] = 1


def _weight_five(d):
    d["queues"]["training"]["weight"] = 5


def _no_pool(d):
    d["pools"].pop("extra", None)


@pytest.mark.parametrize(("applied", "new", "expected"), [
    (_weight, lambda d: None, ["queues.training: weight 1 → 3"]),
    (_weight, _weight, []),
    (_weight, _weight_five, []),
    (_weight, _both(_weight, _pool), []),
    (_pool, lambda d: None, ["pools.extra: added (backend local)"]),
    (_both(_weight, _pool), _weight, ["pools.extra: added (backend local)"]),
    (_queue_and_class, lambda d: None, ["priority_classes.batch: added (value 50, preemptible)",
                                        "queues.inference: removed",
                                        "queues.batch: added (class batch, pools local)"]),
], ids=["comment-only-edit", "carried", "edited-further", "carried-plus-more", "added-dropped", "part-dropped",
        "removed-back"])
def test_reverted_names_what_an_edit_takes_back_of_an_applied_change(applied, new, expected):
    """base: the file as up last took it; applied: a config applied from elsewhere; new: the file edited."""
    base = edited(lambda d: None)
    got = reverted(base, edited(applied), edited(new))
    assert [str(c) for c in got] == expected  # the applied changes, as `config apply` printed them
