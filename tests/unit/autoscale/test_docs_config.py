"""The autoscaling guide's config example is a config crossdock accepts (docs drift otherwise)."""

import re
from pathlib import Path

import yaml

from crossdock.backends.registry import catalog
from crossdock.queue.config import parse_config

ROOT = Path(__file__).resolve().parents[3]


def test_the_autoscaling_guides_example_is_accepted_over_the_reference_config():
    example = yaml.safe_load(re.search(r"```yaml\n(.*?)```", (ROOT / "docs/autoscaling.md").read_text(), re.S)[1])
    data = yaml.safe_load((ROOT / "crossdock/configs/crossdock.yaml").read_text())
    data["queues"].update(example["queues"])
    data["pools"].update(example["pools"])
    data["autoscaler"] = example["autoscaler"]
    cfg = parse_config(data, "docs/autoscaling.md", backends=catalog())
    elastic = cfg.queues["preprocessing"].elastic
    assert (elastic.per_replica, elastic.max, elastic.fleet.name) == (10, 50, "prep-workers")
    assert cfg.pools["cpu"].provisioner == "karpenter" and cfg.pools["cpu"].node_template.cpus == 32
