"""A local user flooding the multi-user socket, run as that user: ``python flood.py SOCKET FLOODS MIB
IDLE KEPT``. Sends FLOODS lines of MIB MiB at once, then opens IDLE connections and holds them,
waiting until all but KEPT are refused; prints one JSON line (each flood's answer, how many idle
connections the service refused and its line),
then waits: a line on stdin makes it wait for the service to close the held ones (its idle
timeout) and print how many it closed; the end of stdin closes everything."""

from __future__ import annotations

import json
import select
import socket
import sys
import threading
import time


def read_to_end(sock: socket.socket, timeout: float = 120.0) -> str:
    """What the service wrote before it closed, or the error that ended the read."""
    sock.settimeout(timeout)
    data = b""
    try:
        while chunk := sock.recv(65536):
            data += chunk
    except OSError as exc:
        return data.decode(errors="replace") + f"<{type(exc).__name__}>"
    return data.decode(errors="replace")


def flood(path: str, mib: int, out: list[str]) -> None:
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(path)
    block = b"1," * (1 << 19)  # 1 MiB of a list that never ends
    try:
        sock.sendall(b'{"op":"jobs","args":{"ids":[')
        for _ in range(mib):
            sock.sendall(block)
        sock.sendall(b"1]}}\n")
    except OSError:
        pass  # the service stopped reading: its answer says why
    out.append(read_to_end(sock))
    sock.close()


def main() -> None:
    path, floods, mib, idle, kept = sys.argv[1], *map(int, sys.argv[2:6])
    answers: list[str] = []
    threads = [threading.Thread(target=flood, args=(path, mib, answers)) for _ in range(floods)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    held = []
    for _ in range(idle):
        sock = socket.socket(socket.AF_UNIX)
        sock.connect(path)
        held.append(sock)
    # a refused connection gets its line and the end at once; an accepted one nothing (until idle)
    refused: list[str] = []
    deadline = time.monotonic() + 60
    pending = list(held)
    while len(pending) > kept and time.monotonic() < deadline:
        ready, _, _ = select.select(pending, [], [], 1.0)
        for sock in ready:
            refused.append(read_to_end(sock, 5.0))
            pending.remove(sock)
    print(json.dumps({"floods": answers, "refused": len(refused), "refusal": refused[0] if refused else "",
                      "open": len(pending)}), flush=True)
    if sys.stdin.readline():
        closed = 0
        deadline = time.monotonic() + 120
        while pending and time.monotonic() < deadline:
            ready, _, _ = select.select(pending, [], [], 1.0)
            for sock in ready:
                if not sock.recv(65536):
                    closed += 1
                    pending.remove(sock)
        print(json.dumps({"closed_by_service": closed, "still_open": len(pending)}), flush=True)
        sys.stdin.readline()
    for sock in held:
        sock.close()


if __name__ == "__main__":
    main()
