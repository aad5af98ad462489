"""CSV loaders: values, GPU-model masks, and malformed rows named by file, line and column."""

from __future__ import annotations

import numpy as np
import pytest
from sim_builders import NODE_CSV, POD_CSV, write

from crossdock.sim.trace import PodTable, TraceError, load_nodes, load_pods


def test_nodes_load_with_models_and_capacity(tmp_path):
    table = load_nodes(write(tmp_path, "n.csv", NODE_CSV))
    assert table.names == ("n0", "n1", "n2")
    assert table.models == ("A10", "T4")
    assert table.model.tolist() == [1, 0, -1]
    assert table.gpus.tolist() == [2, 8, 0]
    assert table.total_gpu_milli == 10_000


def test_pods_load_with_spec_masks_and_times(tmp_path):
    table = load_pods(write(tmp_path, "p.csv", POD_CSV), ("A10", "T4"))
    assert table.gpu_request_milli.tolist() == [500, 1000, 0, 2000]
    assert table.spec.tolist() == [PodTable.ANY, 0b11, PodTable.ANY, 0b10]
    assert table.qos == ("LS", "BE", "BE", "LS")
    assert table.scheduled.tolist() == [0, 10, 20, -1]
    assert table.creation.tolist() == [0, 10, 20, 30]


def test_spec_is_remapped_to_another_model_order(tmp_path):
    table = load_pods(write(tmp_path, "p.csv", POD_CSV), ("A10", "T4")).with_models(("T4", "A10", "V100"))
    assert table.spec.tolist() == [PodTable.ANY, 0b11, PodTable.ANY, 0b01]


BAD_NODES = [
    ("missing-column", "sn,cpu_milli,gpu,model\nn0,1,1,T4\n", 1, "memory_mib"),
    ("not-a-number", "sn,cpu_milli,memory_mib,gpu,model\nn0,abc,1,1,T4\n", 2, "cpu_milli"),
    ("too-many-gpus", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1,9,T4\n", 2, "gpu"),
    ("gpu-without-model", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1,2,\n", 2, "model"),
    ("duplicate", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1,1,T4\nn0,1000,1,1,T4\n", 3, "sn"),
    ("short-row", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,1\n", 2, "gpu"),
    ("negative", "sn,cpu_milli,memory_mib,gpu,model\nn0,1000,-5,1,T4\n", 2, "memory_mib"),
]


@pytest.mark.parametrize("text,line,column", [b[1:] for b in BAD_NODES], ids=[b[0] for b in BAD_NODES])
def test_bad_node_rows_are_located(tmp_path, text, line, column):
    path = write(tmp_path, "nodes.csv", text)
    with pytest.raises(TraceError) as exc:
        load_nodes(path)
    assert (exc.value.line, exc.value.column) == (line, column)
    assert str(path) in str(exc.value) and f":{line}:" in str(exc.value)


HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,creation_time,deletion_time\n"
BAD_PODS = [
    ("share-on-two-gpus", HEADER + "p0,1000,1,2,500,0,1\n", 2, "gpu_milli"),
    ("gpu-without-milli", HEADER + "p0,1000,1,1,0,0,1\n", 2, "gpu_milli"),
    ("milli-over-1000", HEADER + "p0,1000,1,1,1500,0,1\n", 2, "gpu_milli"),
    ("fraction", HEADER + "p0,10.5,1,0,0,0,1\n", 2, "cpu_milli"),
    ("deleted-before-created", HEADER + "p0,1000,1,0,0,50,10\n", 2, "deletion_time"),
    ("empty-name", HEADER + "p0,1000,1,0,0,0,1\n,1,1,0,0,0,1\n", 3, "name"),
]


@pytest.mark.parametrize("text,line,column", [b[1:] for b in BAD_PODS], ids=[b[0] for b in BAD_PODS])
def test_bad_pod_rows_are_located(tmp_path, text, line, column):
    path = write(tmp_path, "pods.csv", text)
    with pytest.raises(TraceError) as exc:
        load_pods(path)
    assert (exc.value.line, exc.value.column) == (line, column)


def test_missing_file_is_a_trace_error(tmp_path):
    with pytest.raises(TraceError, match="cannot read"):
        load_nodes(tmp_path / "absent.csv")


def test_five_column_pod_lists_load_without_times(tmp_path):
    table = load_pods(write(tmp_path, "p.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np0,1,1,8,1000\n"))
    assert not table.has_times
    assert table.spec.tolist() == [PodTable.ANY]
    assert np.array_equal(table.gpu_request_milli, [8000])
