"""The one hostlist expander, with Slurm's documented forms (each checked against
``scontrol show hostnames`` of Slurm 22.05; tests/integration/slurm/test_hostlist_oracle.py keeps
checking them)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crossdock.queue.errors import CrossdockError
from crossdock.queue.hostlist import MAX_HOSTS, HostlistError, expand_hostlist

# (text, hosts): shared with the Slurm oracle test.
VALID = [
    pytest.param("n1", ["n1"], id="single"),
    pytest.param("n[1-3]", ["n1", "n2", "n3"], id="range"),
    pytest.param("n[01-10]", [f"n{i:02d}" for i in range(1, 11)], id="zero-padding"),
    pytest.param("n[8-11]", ["n8", "n9", "n10", "n11"], id="widening-without-padding"),
    pytest.param("n[9-011]", ["n9", "n10", "n11"], id="width-of-lo-as-written"),
    pytest.param("n[00-02]", ["n00", "n01", "n02"], id="padded-zero"),
    pytest.param("n[07]", ["n07"], id="padded-single"),
    pytest.param("n[2-2]", ["n2"], id="one-element-range"),
    pytest.param("n[1,3-5]", ["n1", "n3", "n4", "n5"], id="list-in-brackets"),
    pytest.param("r[1-2]n[1-2]", ["r1n1", "r1n2", "r2n1", "r2n2"], id="two-groups"),
    pytest.param("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"], id="two-groups-dash"),
    pytest.param("n[1-2][3-4]", ["n13", "n14", "n23", "n24"], id="adjacent-groups"),
    pytest.param("a,b[1-2]", ["a", "b1", "b2"], id="plain-then-range"),
    pytest.param("n[1-3],m", ["n1", "n2", "n3", "m"], id="range-then-plain"),
    pytest.param("[1-2]", ["1", "2"], id="no-prefix"),
    pytest.param("a-[1-2]", ["a-1", "a-2"], id="dash-before-group"),
    pytest.param("gpu-a100-1", ["gpu-a100-1"], id="dashes-in-name"),
    pytest.param("n[1-2],n1", ["n1", "n2", "n1"], id="duplicates-kept"),
    pytest.param("n[1-3,2]", ["n1", "n2", "n3", "n2"], id="duplicates-kept-in-group"),
]

# (text, words the error names): crossdock is stricter than Slurm on the first group, which
# Slurm reads leniently (n[1-2 -> "n]", n[1-] -> n1, a,,b -> a b).
INVALID = [
    pytest.param("n[3-1]", "goes down", id="descending"),
    pytest.param("n[010-9]", "goes down", id="descending-padded"),
    pytest.param("n[[1]]", "do not nest", id="nested"),
    pytest.param("n[1-2]]", "no '['", id="extra-close"),
    pytest.param("n[]", "digits only", id="empty-group"),
    pytest.param("n[1,,2]", "digits only", id="empty-range"),
    pytest.param("n[1-2-3]", "digits only", id="two-dashes"),
    pytest.param("n[a]", "digits only", id="letters"),
    pytest.param("n[-1]", "digits only", id="negative"),
    pytest.param("n[1:2]", "digits only", id="colon"),
    # lenient in Slurm, refused here
    pytest.param("n[1-2", "never closed", id="unbalanced-open"),
    pytest.param("n1-2]", "no '['", id="unbalanced-close"),
    pytest.param("n[1-]", "digits only", id="open-ended-range"),
    pytest.param("a,,b", "empty host name", id="empty-item"),
    pytest.param("a,", "empty host name", id="trailing-comma"),
    pytest.param("n[ 1]", "digits only", id="space-in-group"),
    pytest.param(f"n[0-{MAX_HOSTS}]", f"more than {MAX_HOSTS}", id="too-many-in-a-range"),
    pytest.param("a[0-999]b[0-999]", f"more than {MAX_HOSTS}", id="too-many-as-a-product"),
]


@pytest.mark.parametrize("text,hosts", VALID)
def test_expand(text, hosts):
    assert expand_hostlist(text) == hosts


@pytest.mark.parametrize("text,problem", INVALID)
def test_refused_with_the_problem_named(text, problem):
    with pytest.raises(HostlistError) as err:
        expand_hostlist(text)
    assert problem in err.value.problem
    assert err.value.text == text and repr(text) in str(err.value)
    assert isinstance(err.value, CrossdockError) and isinstance(err.value, ValueError)


def test_empty_is_no_host():
    assert expand_hostlist("") == []


def test_text_after_the_last_group_is_a_suffix():
    """Slurm 22.05 refuses ``n[1-2].ib``; its meaning is plain, so it is read as a suffix."""
    assert expand_hostlist("n[1-2].ib") == ["n1.ib", "n2.ib"]


def test_the_cap_counts_the_whole_list():
    assert len(expand_hostlist("a[1-3],b[1-3]", max_hosts=6)) == 6
    with pytest.raises(HostlistError, match="more than 5 hosts"):
        expand_hostlist("a[1-3],b[1-3]", max_hosts=5)


@given(st.lists(st.tuples(st.sampled_from(["n", "gpu-", "r1n"]), st.integers(0, 120), st.integers(0, 30),
                          st.integers(1, 4)), min_size=1, max_size=4))
def test_ranges_match_arithmetic(groups):
    text = ",".join(f"{p}[{lo:0{w}d}-{lo + span:0{w}d}]" for p, lo, span, w in groups)
    expected = [f"{p}{i:0{w}d}" for p, lo, span, w in groups for i in range(lo, lo + span + 1)]
    assert expand_hostlist(text) == expected


@given(st.lists(st.integers(0, 20), min_size=1, max_size=3), st.lists(st.integers(0, 20), min_size=1, max_size=3))
def test_two_groups_are_a_product_leftmost_slowest(outer, inner):
    text = f"r[{','.join(map(str, outer))}]n[{','.join(map(str, inner))}]"
    assert expand_hostlist(text) == [f"r{a}n{b}" for a in outer for b in inner]
