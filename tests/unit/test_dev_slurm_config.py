"""The local Slurm cluster's configuration text and layout (no daemons started)."""

from __future__ import annotations

from pathlib import Path

import pytest

from crossdock.backends.slurm import slurm_env
from crossdock.backends.slurm.envfile import local_env_file, parse_env
from crossdock.dev.slurm import NODES, PARTITIONS, Layout, render_gres_conf, render_slurm_conf

LAYOUT = Layout(Path("/srv/cluster"), 20000)


def conf_lines(text: str, key: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(f"{key}=")]


def test_slurm_conf_names_the_layout_ports_and_paths():
    text = render_slurm_conf(LAYOUT)
    assert text.endswith("\n")
    assert conf_lines(text, "SlurmctldPort") == ["SlurmctldPort=20000"]
    assert conf_lines(text, "SlurmdPort") == ["SlurmdPort=20001"]
    assert conf_lines(text, "StateSaveLocation") == ["StateSaveLocation=/srv/cluster/state"]
    assert conf_lines(text, "AuthInfo") == [f"AuthInfo=socket={LAYOUT.munge_socket},cred_expire=10"]
    assert conf_lines(text, "SlurmctldPidFile") == ["SlurmctldPidFile=/srv/cluster/run/slurmctld.pid"]


def test_slurm_conf_sets_each_scalar_key_once():
    scalar = [line.split("=", 1)[0] for line in render_slurm_conf(LAYOUT).splitlines()
              if "=" in line and not line.startswith(("#", "NodeName=", "PartitionName="))]
    assert len(scalar) == len(set(scalar))


@pytest.mark.parametrize("index,node", list(enumerate(NODES)), ids=[n.name for n in NODES])
def test_each_node_has_its_own_port_and_its_gpus(index, node):
    (line,) = [x for x in conf_lines(render_slurm_conf(LAYOUT), "NodeName") if x.startswith(f"NodeName={node.name} ")]
    assert f" Port={20010 + index} " in line
    assert f" CPUs={node.cpus} RealMemory={node.memory_mib}" in line
    assert (f" Gres=gpu:{node.gpu_type}:{node.gpus}" in line) == bool(node.gpus)


def test_partitions_keep_their_tier_default_and_preempt_mode():
    lines = {x.split()[0].split("=")[1]: x for x in conf_lines(render_slurm_conf(LAYOUT), "PartitionName")}
    assert list(lines) == [p.name for p in PARTITIONS]
    assert "Default=YES" in lines["cpu"] and "Default=YES" not in lines["high"]
    assert "PriorityTier=10" in lines["high"] and "PreemptMode=OFF" in lines["high"]


def test_gres_conf_lists_a_device_file_per_fake_gpu():
    lines = render_gres_conf(LAYOUT).splitlines()
    assert lines[0] == "AutoDetect=off"
    assert lines[1:] == [
        "NodeName=gpu-a100-1 Name=gpu Type=a100 File=/srv/cluster/dev/gpu-a100-1/nvidia[0-7]",
        "NodeName=gpu-l4-1 Name=gpu Type=l4 File=/srv/cluster/dev/gpu-l4-1/nvidia[0-3]",
    ]


def test_runtime_dir_is_short_and_stable_per_root():
    runtime = Layout(Path("/a/very/long/home/directory/state/slurm"), 1).runtime
    assert runtime == Layout(Path("/a/very/long/home/directory/state/slurm"), 2).runtime
    assert runtime.parent == Path("/run/crossdock-slurm") and len(runtime.name) == 10
    assert len(str(Layout(Path("/a"), 1).restd_socket)) < 108


def test_the_backend_finds_the_env_file_the_dev_cluster_writes(tmp_path, monkeypatch):
    monkeypatch.setenv("CROSSDOCK_STATE_DIR", str(tmp_path))
    layout = Layout.of()
    assert layout.root == (tmp_path / "slurm").resolve()
    assert local_env_file() == layout.env_file
    layout.env_file.parent.mkdir(parents=True)
    layout.env_file.write_text("SLURM_CONF=/x/slurm.conf\nSLURM_LOCAL_JWT=a=b\n")
    assert slurm_env({"PATH": "/bin"}) == {"SLURM_CONF": "/x/slurm.conf", "SLURM_LOCAL_JWT": "a=b", "PATH": "/bin"}
    assert slurm_env({"SLURM_CONF": "/mine"}) == {"SLURM_CONF": "/mine"}


def test_env_lines_split_at_the_first_equals_sign():
    assert parse_env("A=1\nB=x=y\n\nnot a pair\n") == {"A": "1", "B": "x=y"}


def test_only_the_elastic_nodes_power_save_and_they_start_powered_down():
    from crossdock.dev.slurm.layout import ELASTIC_NODES

    text = render_slurm_conf(LAYOUT)
    for index, node in enumerate(ELASTIC_NODES, start=len(NODES)):
        (line,) = [x for x in conf_lines(text, "NodeName") if x.startswith(f"NodeName={node.name} ")]
        assert f" Port={20010 + index} " in line and line.endswith(" State=CLOUD")
    assert all(x.endswith("State=UNKNOWN") for x in conf_lines(text, "NodeName") if "elastic" not in x)
    assert conf_lines(text, "SuspendExcNodes") == ["SuspendExcNodes=cpu[1-2],gpu-a100-1,gpu-l4-1"]
    assert conf_lines(text, "SuspendExcParts") == ["SuspendExcParts=cpu,gpu-a100,gpu-l4,high"]
    assert conf_lines(text, "ResumeProgram") == ["ResumeProgram=/srv/cluster/etc/resume.sh"]
    assert "power_save_interval=1" in conf_lines(text, "SlurmctldParameters")[0]
    parts = {x.split()[0].split("=")[1]: x for x in conf_lines(text, "PartitionName")}
    assert "Nodes=elastic[1-3]" in parts["elastic"] and "elastic" not in parts["high"]


def test_the_power_programs_start_and_stop_one_slurmd_per_node_with_their_own_path():
    from crossdock.dev.slurm.config import render_resume_program, render_suspend_program

    resume, suspend = render_resume_program(LAYOUT), render_suspend_program(LAYOUT)
    for text in (resume, suspend):
        assert text.startswith("#!/bin/sh\n") and "\nPATH=/usr/sbin:/usr/bin:/sbin:/bin\n" in text
        assert 'scontrol show hostnames "$1"' in text and "exec </dev/null" in text
    assert 'slurmd -b -N "$node"' in resume and "/srv/cluster/etc/resume-fail" in resume
    assert "/srv/cluster/run/slurmd-\"$node\".pid" in suspend and 'kill "$pid"' in suspend


def test_a_running_cluster_whose_nodes_or_power_saving_changed_is_restarted_not_reconfigured(tmp_path):
    from crossdock.dev.slurm.cluster import _needs_restart

    layout = Layout(tmp_path, 20000)
    layout.etc.mkdir()
    current = render_slurm_conf(layout)
    layout.conf.write_text(current)
    assert not _needs_restart(layout)
    layout.conf.write_text(current.replace("KillWait=5", "KillWait=6"))  # reconfigure takes that
    assert not _needs_restart(layout)
    before = "\n".join(x for x in current.splitlines() if "elastic" not in x and not x.startswith("Suspend"))
    layout.conf.write_text(before)  # as written before the elastic nodes existed
    assert _needs_restart(layout)
