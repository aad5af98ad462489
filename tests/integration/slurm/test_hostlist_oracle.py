"""crossdock's hostlist expander and compressor against Slurm's own (``scontrol show hostnames``
and ``show hostlist``, no job).

Each case: both accept and give the same hosts in the same order, or both refuse, except for the
few texts where Slurm guesses and crossdock refuses (or reads a suffix Slurm refuses), listed.
"""

from __future__ import annotations

import subprocess

import pytest

from crossdock.queue.hostlist import HostlistError, compress_hostlist, expand_hostlist

pytestmark = pytest.mark.slurm

SAME = ("n1 n[1-3] n[01-10] n[8-11] n[9-011] n[00-02] n[07] n[2-2] n[1,3-5] r[1-2]n[1-2] rack[1-2]-n[1-2] "
        "n[1-2][3-4] a,b[1-2] n[1-3],m [1-2] a-[1-2] gpu-a100-1 n[1-2],n1 n[1-3,2] n[1-2]x[1] n[001-120] "
        "n[3-1] n[010-9] n[[1]] n[1-2]] n[] n[1,,2] n[1-2-3] n[a] n[-1] n[1:2]").split()
DELIBERATE = {
    "n[1-2": "Slurm gives 'n]'",
    "n1-2]": "Slurm takes it as a name",
    "n[1-]": "Slurm gives n1",
    "a,,b": "Slurm skips the empty item",
    "n[1-2].ib": "Slurm 22.05 refuses a suffix after the last group; crossdock reads it",
}


def slurm(env, text):
    r = subprocess.run(["scontrol", "show", "hostnames", text], capture_output=True, text=True, timeout=30, env=env)
    return (r.returncode == 0 and "Invalid" not in r.stderr + r.stdout), r.stdout.split()


def ours(text):
    try:
        return True, expand_hostlist(text)
    except HostlistError:
        return False, []


@pytest.mark.parametrize("text", SAME + sorted(DELIBERATE))
def test_agrees_with_scontrol(slurm_cluster, text):
    s_ok, s_hosts = slurm(slurm_cluster, text)
    o_ok, o_hosts = ours(text)
    same = (s_ok, s_hosts if s_ok else []) == (o_ok, o_hosts)
    if text in DELIBERATE:
        assert not same, f"a deliberate difference disappeared ({DELIBERATE[text]}); drop it from DELIBERATE"
    else:
        assert same, f"scontrol: ok={s_ok} {s_hosts}; crossdock: ok={o_ok} {o_hosts}"


# Sorted, distinct hosts (as a job's node list is): scontrol keeps the order it is given, and
# crossdock sorts a group's numbers and drops repeats, as SLURM_JOB_NODELIST reads.
COMPRESSED = ["n01,n02,n10", "n1,n2,n3,n7", "cpu1,cpu2,gpu7", "b2,a1,a2", "n8,n9,n10,n11", "gpu-a100-1,gpu-l4-1",
              "n001,n002,n003", "login"]


@pytest.mark.parametrize("hosts", COMPRESSED)
def test_compresses_as_scontrol(slurm_cluster, hosts):
    r = subprocess.run(["scontrol", "show", "hostlist", hosts], capture_output=True, text=True, timeout=30,
                       env=slurm_cluster)
    assert r.returncode == 0, r.stderr
    assert compress_hostlist(hosts.split(",")) == r.stdout.strip()
