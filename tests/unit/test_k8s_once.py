"""Which pods the Kubernetes backend lets through ``crossdock.io/once``: one per run (once.py)."""

from __future__ import annotations

from crossdock.backends.kubernetes import once


def pod(name: str, job: str = "cd-1-1", index: str | None = None, gated: bool = True, deleting: bool = False) -> dict:
    meta: dict = {"name": name, "labels": {"job-name": job}}
    if index is not None:
        meta["annotations"] = {once.COMPLETION_INDEX: index}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T00:00:00Z"
    return {"metadata": meta, "spec": {"schedulingGates": [{"name": once.GATE}]} if gated else {}}


def bound(p: dict, node: str = "cpu-0") -> dict:
    p["spec"]["nodeName"] = node
    return p


def names(pods) -> list[str]:
    return [p["metadata"]["name"] for p in pods]


def test_a_lone_gated_pod_is_released():
    assert names(once.releasable([pod("a")])) == ["a"]


def test_a_second_pod_of_a_run_keeps_both_gated_until_the_controller_deletes_one():
    assert once.releasable([pod("a"), pod("b")]) == []
    assert once.crowded([pod("a"), pod("b")]) == {("cd-1-1", "")}


def test_a_duplicate_of_a_released_pod_stays_gated():
    assert once.releasable([pod("a", gated=False), pod("b")]) == []


def test_the_slot_of_an_indexed_job_is_its_completion_index():
    pods = [pod("x0", "cd-a7-1-1", "0"), pod("x1", "cd-a7-1-1", "1"), pod("x1b", "cd-a7-1-1", "1")]
    assert names(once.releasable(pods)) == ["x0"]


def test_pods_of_other_jobs_do_not_crowd_each_other():
    assert names(once.releasable([pod("a", "cd-1-1"), pod("b", "cd-2-1")])) == ["a", "b"]


def test_a_pod_being_deleted_is_not_released():
    assert once.releasable([pod("a", deleting=True)]) == []


def test_an_unbound_excess_pod_being_deleted_or_gone_frees_its_slot():
    # The Job controller deletes the excess: the pod left in the slot goes on at once, not after
    # the deleted one's tombstone expires.
    assert names(once.releasable([pod("a", deleting=True), pod("b")])) == ["b"]
    assert names(once.releasable([pod("b")], gone=[pod("a")])) == ["b"]


def test_a_pod_that_was_bound_holds_its_slot_while_deleted_and_after():
    ran = bound(pod("a", gated=False))
    assert once.releasable([bound(pod("a", gated=False, deleting=True)), pod("b")]) == []
    assert once.releasable([pod("b")], gone=[ran]) == []


def test_pods_without_the_gate_or_a_job_are_left_alone():
    other = {"metadata": {"name": "bare"}, "spec": {"schedulingGates": [{"name": once.GATE}]}}
    gang = {"metadata": {"name": "g", "labels": {"job-name": "cd-3-1"}},
            "spec": {"schedulingGates": [{"name": "crossdock.io/gang"}]}}
    assert once.releasable([other, gang]) == []
