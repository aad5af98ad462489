"""The dev services' port choice: below the kernel's ephemeral range, so that no outgoing
connection of any process can take a daemon's port between the choice and its bind."""

import random
import socket

from crossdock.dev import proc


def test_a_free_port_is_drawn_below_the_kernels_ephemeral_range_and_binds():
    lo, _ = proc.ephemeral_ports()
    ports = {proc.free_port(random.Random(seed)) for seed in range(20)}
    assert all(proc.LOWEST_PORT <= p < lo for p in ports) and len(ports) > 1, ports
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports.pop()))  # free: a daemon can listen there


def test_no_ephemeral_range_to_read_means_linuxs_default(tmp_path):
    assert proc.ephemeral_ports(tmp_path / "missing") == (32768, 60999)
    (tmp_path / "range").write_text("40000\t60999\n")
    assert proc.ephemeral_ports(tmp_path / "range") == (40000, 60999)
