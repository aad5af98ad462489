"""Who writes a pending job's reason: the cycle's "no room" reasons become WaitingForCapacity for
the jobs the autoscaler's last pass found waiting for capacity; every other reason stands."""

import pytest

from crossdock.queue.states import Reason
from crossdock.workers.autoscaler import capacity_reasons

WHY = "needs 2 more nodes of pool cpu (starting)"


@pytest.mark.parametrize("cycle, waiting, expected", [
    pytest.param(Reason.RESOURCES, True, Reason.WAITING_FOR_CAPACITY, id="no room now, nodes coming"),
    pytest.param(Reason.UNSCHEDULABLE, True, Reason.WAITING_FOR_CAPACITY, id="no node yet, nodes coming"),
    pytest.param(Reason.RESOURCES, False, Reason.RESOURCES, id="no room, no nodes coming"),
    pytest.param(Reason.QUOTA_EXCEEDED, True, Reason.QUOTA_EXCEEDED, id="quota is not capacity"),
    pytest.param(Reason.DEPENDENCY, True, Reason.DEPENDENCY, id="a dependency is not capacity"),
    pytest.param(Reason.PRIORITY, True, Reason.PRIORITY, id="others are ahead"),
    pytest.param(Reason.JOB_HELD_USER, True, Reason.JOB_HELD_USER, id="held"),
])
def test_capacity_reasons(cycle, waiting, expected):
    reasons, explanations = capacity_reasons({7: cycle}, {7: "the cycle's words"}, {7: WHY} if waiting else {})
    assert reasons == {7: expected}
    assert explanations == {7: WHY if expected == Reason.WAITING_FOR_CAPACITY else "the cycle's words"}


def test_jobs_the_cycle_did_not_report_are_left_alone():
    assert capacity_reasons({1: Reason.RESOURCES}, {}, {2: WHY}) == ({1: Reason.RESOURCES}, {})
