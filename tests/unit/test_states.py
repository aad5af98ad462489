import pytest

from crossdock.queue.errors import IllegalTransition
from crossdock.queue.states import TERMINAL, TRANSITIONS, JobState, Reason, can_transition, stopped_outcome, transition


@pytest.mark.parametrize("old,new", [
    (JobState.PENDING, JobState.SCHEDULED),
    (JobState.SCHEDULED, JobState.RUNNING),
    (JobState.RUNNING, JobState.COMPLETED),
    (JobState.RUNNING, JobState.TIMEOUT),
    (JobState.RUNNING, JobState.PREEMPTED),
    (JobState.PREEMPTED, JobState.PENDING),
    (JobState.FAILED, JobState.PENDING),
    (JobState.SCHEDULED, JobState.COMPLETED),
], ids=lambda s: s.value if isinstance(s, JobState) else s)
def test_legal_moves(old, new):
    assert transition(old, new, 1) is new


@pytest.mark.parametrize("old,new", [
    (JobState.PENDING, JobState.RUNNING),
    (JobState.PENDING, JobState.COMPLETED),
    (JobState.COMPLETED, JobState.RUNNING),
    (JobState.CANCELLED, JobState.COMPLETED),
    (JobState.PREEMPTED, JobState.RUNNING),
], ids=lambda s: s.value if isinstance(s, JobState) else s)
def test_illegal_moves_raise_a_named_error(old, new):
    with pytest.raises(IllegalTransition, match=f"job 7: illegal state transition {old} -> {new}"):
        transition(old, new, 7)


def test_every_state_has_a_docstring_and_a_row():
    for s in JobState:
        assert s in TRANSITIONS
        assert s not in TRANSITIONS[s], f"{s} may not move to itself"


def test_terminal_states_only_leave_by_requeue():
    for s in TERMINAL:
        assert TRANSITIONS[s] == {JobState.PENDING}
        assert s.terminal and not s.active
    assert can_transition(JobState.RUNNING, JobState.PENDING)


@pytest.mark.parametrize("reported, reason, cancel, preempt, outcome", [
    # A preempted victim: however it exited after the signal, it was preempted.
    (JobState.FAILED, Reason.NON_ZERO_EXIT, False, True, (JobState.PREEMPTED, Reason.PREEMPTED)),
    (JobState.COMPLETED, Reason.NONE, False, True, (JobState.PREEMPTED, Reason.PREEMPTED)),
    (JobState.CANCELLED, Reason.CANCELLED_BY_USER, False, True, (JobState.PREEMPTED, Reason.PREEMPTED)),
    (JobState.PREEMPTED, "PreemptedByScheduler", False, True, (JobState.PREEMPTED, "PreemptedByScheduler")),
    # A user's cancel wins over a preemption in flight.
    (JobState.PREEMPTED, Reason.PREEMPTED, True, True, (JobState.CANCELLED, Reason.CANCELLED_BY_USER)),
    (JobState.FAILED, Reason.NON_ZERO_EXIT, True, True, (JobState.CANCELLED, Reason.CANCELLED_BY_USER)),
    (JobState.COMPLETED, Reason.NONE, True, False, (JobState.CANCELLED, Reason.CANCELLED_BY_USER)),
    # Not ended yet, or nothing asked: the backend's word stands.
    (JobState.RUNNING, Reason.NONE, True, True, (JobState.RUNNING, Reason.NONE)),
    (JobState.FAILED, Reason.NON_ZERO_EXIT, False, False, (JobState.FAILED, Reason.NON_ZERO_EXIT)),
    (JobState.PREEMPTED, "PreemptedByScheduler", False, False, (JobState.PREEMPTED, "PreemptedByScheduler")),
], ids=["killed-143", "checkpoint-0", "scancelled", "k8s-preempted", "cancel-in-grace", "cancel-after-exit",
        "cancel-exit-0", "still-running", "no-stop", "backend-preempted"])
def test_the_stop_request_decides_how_a_stopped_attempt_ended(reported, reason, cancel, preempt, outcome):
    assert stopped_outcome(reported, reason, cancel=cancel, preempt=preempt) == outcome
