"""Ports for daemons (the dev services, local service replicas): below the kernel's ephemeral
range, so that no outgoing connection of any process can take one between the choice and the bind."""

import random
import socket

from crossdock.backends.local import ports


def test_a_free_port_is_drawn_below_the_kernels_ephemeral_range_and_binds():
    lo, _ = ports.ephemeral_ports()
    drawn = {ports.free_port(random.Random(seed)) for seed in range(20)}
    assert all(ports.LOWEST_PORT <= p < lo for p in drawn) and len(drawn) > 1, drawn
    with socket.socket() as s:
        s.bind(("127.0.0.1", drawn.pop()))  # free: a daemon can listen there


def test_no_ephemeral_range_to_read_means_linuxs_default(tmp_path):
    assert ports.ephemeral_ports(tmp_path / "missing") == (32768, 60999)
    (tmp_path / "range").write_text("40000\t60999\n")
    assert ports.ephemeral_ports(tmp_path / "range") == (40000, 60999)
