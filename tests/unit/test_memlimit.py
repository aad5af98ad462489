"""The local memory limit's parts: the process-group RSS sum from /proc, and the cgroup v2 plumbing
(on a fake tree: the kernel's side is the integration test's)."""

from pathlib import Path

from crossdock.backends.local import memlimit


def stat(pid: int, comm: str, state: str, pgrp: int, rss_pages: int) -> str:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime cutime
    # cstime priority nice threads itrealvalue starttime vsize rss
    rest = [state, "1", str(pgrp), str(pgrp)] + ["0"] * 17 + [str(rss_pages)] + ["0"] * 10
    return f"{pid} ({comm}) " + " ".join(rest) + "\n"


def test_group_rss_sums_the_live_members_of_one_group(tmp_path):
    for pid, comm, st, grp, rss in [(10, "sh", "S", 10, 100), (11, "py (x) y", "R", 10, 50), (12, "other", "S", 7, 999),
                                    (13, "dead", "Z", 10, 999)]:
        (tmp_path / str(pid)).mkdir()
        (tmp_path / str(pid) / "stat").write_text(stat(pid, comm, st, grp, rss))
    (tmp_path / "self").mkdir()
    assert memlimit.group_rss(10, tmp_path) == 150 * memlimit.PAGE


def fake_v2(tmp_path: Path) -> tuple[Path, Path]:
    proc, root = tmp_path / "proc", tmp_path / "cg"
    (proc / "self").mkdir(parents=True)
    (proc / "self" / "cgroup").write_text("0::/svc\n")
    (root / "svc").mkdir(parents=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    (root / "svc" / "cgroup.subtree_control").write_text("")
    return proc, root


def test_cgroup_v2_child_gets_the_limit_and_reports_an_oom_kill(tmp_path, monkeypatch):
    monkeypatch.delenv("CROSSDOCK_CGROUP", raising=False)
    proc, root = fake_v2(tmp_path)
    limit = memlimit.MemoryLimit.create(50 << 20, "crossdock-7-1", proc, root)
    child = root / "svc" / "crossdock-7-1"
    assert limit.how == "cgroup" and limit.cgroup == child
    assert (child / "memory.max").read_text() == str(50 << 20)
    assert (root / "svc" / "cgroup.subtree_control").read_text() == "+memory"
    limit.attach(4242)
    assert (child / "cgroup.procs").read_text() == "4242"
    (child / "memory.current").write_text("1048576\n")
    (child / "memory.events").write_text("low 0\nhigh 0\nmax 3\noom 1\noom_kill 0\n")
    assert not limit.check() and limit.peak_kib == 1024
    (child / "memory.events").write_text("low 0\nhigh 0\nmax 9\noom 2\noom_kill 1\n")
    assert limit.check()


def test_no_cgroup_v2_means_the_watcher(tmp_path, monkeypatch):
    monkeypatch.delenv("CROSSDOCK_CGROUP", raising=False)
    proc, root = fake_v2(tmp_path)
    (root / "cgroup.controllers").unlink()  # a v1 or tmpfs mount
    assert memlimit.MemoryLimit.create(1 << 20, "crossdock-1-1", proc, root).how == "watcher"


def test_a_cgroup_that_cannot_be_made_falls_back_to_the_watcher(tmp_path, monkeypatch):
    proc, root = fake_v2(tmp_path)
    monkeypatch.setenv("CROSSDOCK_CGROUP", str(tmp_path / "missing" / "dir"))
    limit = memlimit.MemoryLimit.create(1 << 20, "crossdock-1-1", proc, root)
    assert limit.how == "watcher" and not (tmp_path / "missing").exists()
