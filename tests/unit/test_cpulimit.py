"""The local CPU limit's plumbing on fake cgroup trees (the kernel's side is
``tests/integration/local/test_cpu_limit.py``): the kubelet's conversions, v1's own hierarchy,
v2's one cgroup shared with the memory limit, and running unconfined where nothing can be made."""

from pathlib import Path

from crossdock.backends.local import cpulimit, memlimit


def test_the_conversions_are_the_kubelets():
    assert [cpulimit.shares(m) for m in (1, 500, 1000, 2500, 10**9)] == [2, 512, 1024, 2560, 262_144]
    assert [cpulimit.quota_us(m) for m in (1, 500, 1000, 2500)] == [1_000, 50_000, 100_000, 250_000]
    assert [cpulimit.weight(m) for m in (1, 1000, 10**9)] == [1, 39, 10_000]


def fake_v1(tmp_path: Path) -> tuple[Path, Path]:
    proc, root = tmp_path / "proc", tmp_path / "cg"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("4:memory:/svc\n2:cpu,cpuacct:/svc\n0::/\n")
    (root / "cpu,cpuacct" / "svc").mkdir(parents=True)
    (root / "cpu,cpuacct" / "cpu.shares").write_text("1024\n")
    return proc, root


def test_cgroup_v1_child_of_the_own_cpu_cgroup_gets_shares_from_the_request_and_a_quota_from_the_limit(
        tmp_path, monkeypatch):
    monkeypatch.delenv("CROSSDOCK_CGROUP", raising=False)
    proc, root = fake_v1(tmp_path)
    limit = cpulimit.CpuLimit.create(500, 2000, "crossdock-3-1-9", proc=proc, root=root)
    child = root / "cpu,cpuacct" / "svc" / "crossdock-3-1-9"
    assert limit.how == "cgroup" and limit.cgroup == child
    assert {k: (child / k).read_text() for k in ("cpu.shares", "cpu.cfs_quota_us", "cpu.cfs_period_us")} == {
        "cpu.shares": "512", "cpu.cfs_quota_us": "200000", "cpu.cfs_period_us": "100000"}
    limit.attach(4242)
    assert (child / "cgroup.procs").read_text() == "4242"
    (child / "cpu.stat").write_text("nr_periods 40\nnr_throttled 7\nthrottled_time 123\n")
    assert limit.throttled() == (7, 40)
    for f in child.iterdir():  # the kernel's files go with the directory; a fake tree's must go first
        f.unlink()
    limit.close()
    assert not child.exists() and limit.how == "none"


def test_cgroup_v2_writes_weight_and_max_into_the_memory_limits_cgroup(tmp_path, monkeypatch):
    monkeypatch.delenv("CROSSDOCK_CGROUP", raising=False)
    proc, root = tmp_path / "proc", tmp_path / "cg"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/svc\n")
    (root / "svc").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (root / "svc" / "cgroup.subtree_control").write_text("")
    memory = memlimit.MemoryLimit.create(50 << 20, "crossdock-3-1-9", proc, root)
    limit = cpulimit.CpuLimit.create(1000, 1500, "crossdock-3-1-9", memory, proc, root)
    child = root / "svc" / "crossdock-3-1-9"
    assert limit.cgroup == memory.cgroup == child and not limit.owned
    assert (child / "cpu.weight").read_text() == "39" and (child / "cpu.max").read_text() == "150000 100000"
    assert "+cpu" in (root / "svc" / "cgroup.subtree_control").read_text()
    limit.attach(4242)  # the memory limit moves the job; this one has nothing to do
    assert not (child / "cgroup.procs").exists()
    limit.close()
    assert child.exists()  # the memory limit's to remove


def test_no_cpu_controller_runs_the_job_unconfined(tmp_path, monkeypatch):
    monkeypatch.delenv("CROSSDOCK_CGROUP", raising=False)
    proc, root = fake_v1(tmp_path)
    (root / "cpu,cpuacct" / "cpu.shares").unlink()  # not a cpu hierarchy
    limit = cpulimit.CpuLimit.create(500, 1000, "crossdock-1-1-1", proc=proc, root=root)
    assert limit.how == "none" and limit.throttled() is None
    limit.attach(1)
    limit.close()


def test_a_cgroup_that_cannot_be_made_leaves_nothing_behind(tmp_path, monkeypatch):
    proc, root = fake_v1(tmp_path)
    monkeypatch.setenv("CROSSDOCK_CGROUP", str(tmp_path / "missing" / "dir"))
    limit = cpulimit.CpuLimit.create(500, 1000, "crossdock-1-1-1", proc=proc, root=root)
    assert limit.how == "none" and not (tmp_path / "missing").exists()
