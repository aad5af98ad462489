"""Loopback ports for a daemon to listen on soon: the dev services' (etcd, kube-apiserver,
Redis, Sentinel…) and a local service replica's.

A port the kernel picks (``bind(0)``) comes from the ephemeral range, which it also draws the
local port of every outgoing connection from: between the choice and the daemon's bind, any
process's next connection may take it (a CI run's kube-controller-manager met "address already in
use" that way). Ports are drawn below that range instead, where only another caller of this
function can take one, at random over thousands.
"""

from __future__ import annotations

import random
import socket
from pathlib import Path

LOWEST_PORT = 10_000


def ephemeral_ports(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The range the kernel draws the local port of every outgoing connection from."""
    try:
        lo, hi = (int(v) for v in path.read_text().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999  # Linux's default


def free_port(rng: random.Random | None = None, host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that nothing listens on now, below the ephemeral range (bind(0)'s
    where there is no room below it)."""
    lo, _ = ephemeral_ports()
    rng = rng or random.SystemRandom()
    for _ in range(64 if lo - LOWEST_PORT > 1000 else 0):
        port = rng.randrange(LOWEST_PORT, lo)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            try:
                sock.bind((host, port))
            except OSError:
                continue
            return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:  # no room below the range
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
