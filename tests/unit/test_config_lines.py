"""A refused config file names the line of each problem: ``FILE:LINE: path: message``, every
problem at once, LINE the key (or list item) the problem's path leads to in the file."""

from __future__ import annotations

import textwrap

import pytest

from crossdock.backends.registry import catalog
from crossdock.configfile import load_config, load_text, located
from crossdock.queue.errors import ConfigError

GOOD = """\
priority_classes:
  training: {value: 100, preemptible: true}
  inference:
    value: 1000
pools:
  a100:
    backend: local
    nodes:
      - name: n1
        cpus: 4
        memory_mib: 1000
      - name: n2
        cpus: 8
        memory_mib: 2000
queues:
  training:
    priority_class: training
    pools: [a100]
scheduler:
  lease_seconds: 10
  interval_seconds: 1
"""


def errors_of(text: str, source: str = "crossdock.yaml") -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load_text(text, source, catalog())
    return exc.value.errors


def edited(old: str, new: str) -> str:
    assert old in GOOD
    return GOOD.replace(old, new, 1)


def test_the_good_config_loads():
    assert load_text(GOOD, "crossdock.yaml", catalog()).pools["a100"].nodes[1].name == "n2"


@pytest.mark.parametrize("old,new,error", [
    # a wrong type deep in pools: the second node's cpus, line 13
    ("cpus: 8", "cpus: lots", "crossdock.yaml:13: pools.a100.nodes.1.cpus: Input should be a valid integer,"
                              " unable to parse string as an integer (got 'lots')"),
    # an unknown key, in a block mapping
    ("    backend: local\n", "    backend: local\n    colour: blue\n",
     "crossdock.yaml:8: pools.a100.colour: unknown field; remove it or check its spelling"),
    # an unknown key inside a flow mapping
    ("{value: 100, preemptible: true}", "{value: 100, preemtible: true}",
     "crossdock.yaml:2: priority_classes.training.preemtible: unknown field; remove it or check its spelling"),
    # a cross-field check of a model (its loc is the section, the field is in the message)
    ("interval_seconds: 1", "interval_seconds: 6",
     "crossdock.yaml:21: scheduler: interval_seconds: 6 must be ≤ half of lease_seconds (10);"
     " raise lease_seconds to ≥ 12 or lower interval_seconds"),
    # a cross-section reference: the list item that names no pool
    ("pools: [a100]", "pools: [a100, h100]", "crossdock.yaml:18: queues.training.pools.1: unknown pool 'h100'; defined: a100"),
    # a check across pools (its path is the whole message): the pool's nodes
    ("name: n2", "name: n1", "crossdock.yaml:8: pools.a100.nodes: node 'n1' is also declared in pool 'a100';"
                             " give every node its own name"),
    # a required field missing: the mapping it is missing from
    ("    priority_class: training\n", "", "crossdock.yaml:16: queues.training.priority_class: required field is missing"),
    # a key that holds dots, named at the start of the message
    ("    pools: [a100]\n", "    pools: [a100]\n    plugin_weights: {nvidia.com/gpu: 101}\n",
     "crossdock.yaml:19: queues.training.plugin_weights: nvidia.com/gpu: resource weight 101 must be within 1–100,"
     " as in kube-scheduler"),
], ids=["type-deep-in-pools", "unknown-key", "unknown-key-flow", "cross-field", "unknown-pool", "duplicate-node",
        "missing-field", "dotted-key"])
def test_each_error_names_the_line_of_its_key(old, new, error):
    assert errors_of(edited(old, new)) == [error]


def test_two_errors_at_once_each_with_its_line():
    text = edited("cpus: 8", "cpus: -3").replace("pools: [a100]", "pools: [a100, h100]")
    assert errors_of(text) == [
        "crossdock.yaml:13: pools.a100.nodes.1.cpus: must be ≥ 1",
        "crossdock.yaml:18: queues.training.pools.1: unknown pool 'h100'; defined: a100",
    ]


def test_a_backend_check_names_the_line_of_its_pool():
    text = GOOD.replace("pools:\n  a100:", "pools:\n  hpc:\n    backend: slurm\n  a100:", 1)
    assert errors_of(text) == ["crossdock.yaml:6: pools.hpc: a slurm pool needs partition: <slurm partition name>"]


def test_a_file_names_its_path(tmp_path):
    path = tmp_path / "site.yaml"
    path.write_text(edited("cpus: 8", "cpus: lots"))
    with pytest.raises(ConfigError) as exc:
        load_config(path, catalog())
    assert [e.split(" pools.")[0] for e in exc.value.errors] == [f"{path}:13:"]


def test_a_path_the_file_does_not_hold_keeps_the_file_without_a_line():
    text = textwrap.dedent("""\
        priority_classes: {t: {value: 1}}
        pools: {p: {backend: local}}
        queues: {q: {priority_class: t, pools: [p]}}
        """)
    assert located(["scheduler: a scheduling cycle over this config fails (x)", "site.yaml: cannot read"],
                   text, "site.yaml") == ["site.yaml: scheduler: a scheduling cycle over this config fails (x)",
                                          "site.yaml: cannot read"]


def test_of_two_equal_keys_the_line_is_the_one_in_force():
    text = GOOD.replace("  training: {value: 100, preemptible: true}\n",
                        "  training: {value: 100, preemptible: true}\n  training: {value: 1, colour: x}\n", 1)
    # PyYAML keeps the second key: its error is on line 3
    assert errors_of(text) == ["crossdock.yaml:3: priority_classes.training.colour: unknown field;"
                               " remove it or check its spelling"]


def test_a_key_merged_from_an_anchor_is_placed_where_the_anchor_sets_it():
    text = GOOD.replace("""      - name: n2
        cpus: 8
        memory_mib: 2000
""", """      - <<: *first
        name: n2
""").replace("      - name: n1\n", "      - &first\n        name: n1\n").replace("memory_mib: 1000", "memory_mib: lots")
    assert [e.split(": Input")[0] for e in errors_of(text)] == [
        "crossdock.yaml:12: pools.a100.nodes.0.memory_mib", "crossdock.yaml:12: pools.a100.nodes.1.memory_mib"]
