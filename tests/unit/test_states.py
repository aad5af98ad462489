import pytest

from crossdock.queue.errors import IllegalTransition
from crossdock.queue.states import TERMINAL, TRANSITIONS, JobState, can_transition, transition


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
