from pathlib import Path

import pytest

from crossdock.configfile import load_config
from crossdock.queue.config import lint, parse_config
from crossdock.queue.errors import ConfigError
from crossdock.queue.ports import Capabilities
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
    ("pools.a100.bogus", 1, "pools.a100.bogus: unknown field"),
    ("default_queue", "nope", "default_queue: unknown queue 'nope'"),
], ids=["negative", "placement", "class", "pool", "extra", "default-queue"])
def test_errors_name_their_path(path, value, message):
    with pytest.raises(ConfigError) as exc:
        parse_config(with_(path, value))
    assert any(line.startswith(message) for line in exc.value.errors), exc.value.errors


def test_a_pool_of_a_backend_with_partitions_must_name_one():
    backends = {"k8s": Capabilities(), "hpc": Capabilities(partitions=True)}
    with pytest.raises(ConfigError) as exc:
        parse_config(with_("pools.cluster", {"backend": "hpc"}), backends=backends)
    assert exc.value.errors == ["pools.cluster: a hpc pool needs partition: <hpc partition name>"]
    assert parse_config(with_("pools.cluster", {"backend": "hpc", "partition": "gpu"}), backends=backends)
    assert parse_config(with_("pools.cluster", {"backend": "k8s"}), backends=backends)


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


NODE = {"name": "n1", "cpus": 4, "memory_mib": 1024}


@pytest.mark.parametrize("path,value,message", [
    ("pools.a100.nodes", [{**NODE, "cpus": 10**30}], "pools.a100.nodes.0.cpus: must be ≤ 1048576"),
    ("pools.a100.nodes", [{**NODE, "memory_mib": 2**60}], "pools.a100.nodes.0.memory_mib: must be ≤"),
    ("pools.a100.nodes", [NODE, NODE], "pools.a100.nodes: node 'n1' is also declared in pool 'a100'"),
    ("scheduler.lease_seconds", 0.0001, "scheduler.lease_seconds: must be ≥ 0.5"),
    ("scheduler.lease_seconds", float("inf"), "scheduler.lease_seconds: must be a finite number"),
    ("scheduler.interval_seconds", float("nan"), "scheduler.interval_seconds: must be a finite number"),
    ("scheduler", {"interval_seconds": 3, "lease_seconds": 5}, "scheduler: interval_seconds: 3 must be ≤ half of lease_seconds"),
    ("scheduler.fairshare_half_life_minutes", 1e-9, "scheduler.fairshare_half_life_minutes: must be ≥ 1"),
    ("scheduler.max_array_size", 10**9, "scheduler.max_array_size: must be ≤ 4000001"),
    ("priority_classes.training.value", 2**40, "priority_classes.training.value: must be ≤ 2147483647"),
    ("queues.training.weight", float("inf"), "queues.training.weight: must be a finite number"),
    ("queues", {}, "queues: must not be empty"),
    ("priority_classes", {}, "priority_classes: must not be empty"),
    ("queues.training.pools", 1, "queues.training.pools: Input should be a valid list"),
    ("default_queue", ["a"], "default_queue: Input should be a valid string"),
], ids=["cpus-1e30", "memory", "duplicate-node", "lease-tiny", "lease-inf", "interval-nan", "interval-over-half-lease",
        "half-life", "array-size", "class-value", "weight-inf", "empty-queues", "empty-classes", "pools-not-a-list",
        "default-not-a-name"])
def test_numbers_beyond_what_the_service_can_run_are_refused_with_the_range(path, value, message):
    with pytest.raises(ConfigError) as exc:
        parse_config(with_(path, value))
    assert any(line.startswith(message) for line in exc.value.errors), exc.value.errors


def test_the_dry_cycle_reports_what_the_bounds_let_through():
    from datetime import datetime, timezone

    from crossdock.queue.probe import dry_cycle
    from crossdock.queue.snapshot import Node

    cfg = parse_config(with_("pools.a100", {"backend": "local"}))
    now = datetime(2026, 1, 1, tzinfo=timezone.utc)
    assert dry_cycle(cfg, [Node("n1", "a100", "local", 4000, 1024)], now) == []
    # a node no int64 inventory can hold, as a backend's discovery (not the config) could report it
    errors = dry_cycle(cfg, [Node("n1", "a100", "local", 10**30, 1024)], now)
    assert len(errors) == 1 and errors[0].startswith("scheduler: a scheduling cycle over this config fails (OverflowError"), errors
