from pathlib import Path

import pytest

from crossdock.configfile import load_config
from crossdock.queue.config import lint, parse_config
from crossdock.queue.errors import ConfigError
from crossdock.settings import DEFAULT_CONFIG

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = DEFAULT_CONFIG.parent

BASE = {
    "priority_classes": {"training": {"value": 100, "preemptible": True}, "inference": {"value": 1000}},
    "pools": {"a100": {"backend": "k8s", "selector": {"pool": "a100"}}},
    "queues": {"training": {"priority_class": "training", "pools": ["a100"], "placement": "binpack"}},
}


def with_(path: str, value):
    import copy

    data = copy.deepcopy(BASE)
    node = data
    keys = path.split(".")
    for k in keys[:-1]:
        node = node.setdefault(k, {})
    node[keys[-1]] = value
    return data


@pytest.mark.parametrize("path,value,message", [
    ("queues.training.per_job", {"gpu": -1}, "queues.training.per_job.gpu: must be ≥ 0"),
    ("queues.training.placement", "pack", "queues.training.placement: must be one of"),
    ("queues.training.priority_class", "nope", "queues.training.priority_class: unknown priority class 'nope'"),
    ("queues.training.pools", ["a100", "h100"], "queues.training.pools.1: unknown pool 'h100'"),
    ("pools.hpc", {"backend": "slurm"}, "pools.hpc: a slurm pool needs partition"),
    ("pools.a100.bogus", 1, "pools.a100.bogus: unknown field"),
    ("default_queue", "nope", "default_queue: unknown queue 'nope'"),
], ids=["negative", "placement", "class", "pool", "slurm-partition", "extra", "default-queue"])
def test_errors_name_their_path(path, value, message):
    with pytest.raises(ConfigError) as exc:
        parse_config(with_(path, value))
    assert any(line.startswith(message) for line in exc.value.errors), exc.value.errors


def test_every_error_is_reported_at_once():
    data = with_("queues.training.per_job", {"gpu": -1, "cpu": -2})
    data["queues"]["training"]["pools"] = ["missing"]
    with pytest.raises(ConfigError) as exc:
        parse_config(data)
    assert len(exc.value.errors) == 3


def test_shipped_configs_are_valid_and_clean():
    for name in ("crossdock.yaml", "local.yaml"):
        cfg = load_config(CONFIGS / name)
        assert lint(cfg) == []
    ref = load_config(CONFIGS / "crossdock.yaml")
    assert ref.queues["training"].per_job.gpu == 8 and ref.queues["training"].per_job.cpu == 16
    assert ref.queues["inference"].placement == "spread"
    assert ref.priority_classes["training"].preemptible and not ref.priority_classes["inference"].preemptible


def test_configs_ship_inside_the_package_and_the_top_level_folder_links_there():
    import crossdock

    assert CONFIGS == Path(crossdock.__file__).resolve().parent / "configs" and DEFAULT_CONFIG.is_file()
    assert (CONFIGS / "scenarios" / "mixed-gpu-cluster.yaml").is_file()
    top = ROOT / "configs"
    if top.is_symlink():  # a checkout without symlinks has a plain file there
        assert top.resolve() == CONFIGS


def test_lint_flags_inference_cpu_request_below_limit():
    data = with_("queues.inference", {"priority_class": "inference", "pools": ["a100"], "placement": "spread",
                                      "cpu_request_ratio": 0.5})
    warnings = lint(parse_config(data))
    assert any(w.startswith("queues.inference.cpu_request_ratio") for w in warnings)


def test_broken_yaml_names_the_line(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("queues: {training: [\n")
    with pytest.raises(ConfigError, match="line") as exc:
        load_config(p)
    assert exc.value.errors[0].startswith(f"{p}: line 2, column 1: not valid YAML"), exc.value.errors


@pytest.mark.parametrize("weights,message", [
    ({"cpu": 0}, "resource weight 0 must be within 1–100"),
    ({"nvidia.com/gpu": 101}, "resource weight 101"),
    ({"MostAllocated": -1}, "plugin weight -1 must be within 0–1000000"),
    ({"Bogus": 1}, "Bogus: unknown"),
], ids=["cpu-zero", "gpu-101", "negative-plugin", "unknown"])
def test_plugin_weights_are_checked_at_load(weights, message):
    with pytest.raises(ConfigError) as exc:
        parse_config(with_("queues.training.plugin_weights", weights))
    assert any(line.startswith("queues.training.plugin_weights") and message in line for line in exc.value.errors), \
        exc.value.errors


def test_valid_plugin_weights_load():
    cfg = parse_config(with_("queues.training.plugin_weights", {"cpu": 2, "nvidia.com/gpu": 5, "GpuFragmentation": 0}))
    assert cfg.queues["training"].plugin_weights["nvidia.com/gpu"] == 5
