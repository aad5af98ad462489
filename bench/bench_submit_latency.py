"""Per-call time of ``crossdock submit --wrap true`` in a shell loop, against a bare interpreter
start (``python3 -I -S -c pass``) in the same run, rounds interleaved so that a busy machine
weighs on both alike; with ``--sbatch``, against ``sbatch --wrap true`` on the Slurm cluster
the environment names (SLURM_CONF) too.

    python bench/bench_submit_latency.py [--calls 20] [--rounds 3] [--sbatch] [--baseline CHECKOUT] [--batch N] [--socket]

``--baseline`` times another checkout's ``crossdock submit`` too (PYTHONPATH=CHECKOUT), for
before/after figures taken under the same load.

``--batch N`` times ``crossdock submit --batch FILE`` with N submissions per call too, as
milliseconds per job (target: at most sbatch's per call).

``--socket`` starts ``crossdock up --multi-user`` on the same store (jobs held, so nothing runs)
and times ``crossdock submit`` through its socket too: the client then imports only the standard
library and the service parses, admits and stores (``crossdock.gateway.argv``).

Prints the median per-call milliseconds of each and the ratio crossdock / bare interpreter
(target: <= 2). The store is an embedded Redis in a temporary directory; no scheduler runs.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path


LOOP = 'n=$1; shift; i=0; while [ "$i" -lt "$n" ]; do "$@" >/dev/null 2>&1 || exit 1; i=$((i+1)); done'
"""A shell loop running its arguments as one command n times (the argv is never a shell string)."""


def per_call_ms(argv: list[str], calls: int, env: dict[str, str]) -> float:
    """Milliseconds per call of ``argv`` run ``calls`` times by one shell loop."""
    t0 = time.perf_counter()
    subprocess.run(["/bin/sh", "-c", LOOP, "sh", str(calls), *argv], check=True, env=env)
    return (time.perf_counter() - t0) * 1000 / calls


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20, help="calls per loop")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--sbatch", action="store_true", help="time sbatch on the cluster SLURM_CONF names too")
    ap.add_argument("--baseline", type=Path, help="a checkout whose crossdock submit to time as well")
    ap.add_argument("--socket", action="store_true", help="time submit through a multi-user service's socket")
    ap.add_argument("--batch", type=int, default=0, help="submissions per `submit --batch` call (0: not timed)")
    args = ap.parse_args()

    from bench_submit import bench_store

    from crossdock.backends.redis_store import embedded

    tmp, store_env = bench_store()
    env = {**os.environ, **store_env}
    exe = Path(sys.executable).with_name("crossdock")
    crossdock = [str(exe)] if exe.exists() else [sys.executable, "-m", "crossdock"]
    paths = {"bare interpreter": ["python3", "-I", "-S", "-c", "pass"],
             "crossdock submit": [*crossdock, "submit", "--wrap", "true", "-H"]}
    if args.sbatch:
        if not shutil.which("sbatch") or not os.environ.get("SLURM_CONF"):
            raise SystemExit("--sbatch: no sbatch on PATH or SLURM_CONF unset (export the local cluster's env)")
        paths["sbatch"] = ["sbatch", "--wrap", "true", "-o", "/dev/null"]
    envs = {name: {**env, "CROSSDOCK_SOCKET": "none"} for name in paths}
    up = None
    if args.socket:
        sock = Path(tmp) / "run" / "crossdock.sock"
        up = subprocess.Popen([*crossdock, "up", "--multi-user", "--workers", "1"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**env, "CROSSDOCK_SOCKET": str(sock)})
        deadline = time.monotonic() + 60
        while not sock.is_socket():
            if time.monotonic() > deadline or up.poll() is not None:
                raise SystemExit("--socket: crossdock up --multi-user did not open its socket")
            time.sleep(0.2)
        paths["submit via socket"] = paths["crossdock submit"]
        envs["submit via socket"] = {**env, "CROSSDOCK_SOCKET": str(sock)}
    if args.baseline:
        paths["baseline submit"] = paths["crossdock submit"]
        envs["baseline submit"] = {**env, "PYTHONPATH": str(args.baseline.resolve())}
    times: dict[str, list[float]] = {name: [] for name in paths}
    batch = Path(tmp) / "batch.txt"
    batch.write_text("--wrap=true\n" * args.batch)
    if args.batch:
        times["submit --batch, per job"] = []
    try:
        for _ in range(args.rounds):
            for name, argv in paths.items():
                times[name].append(per_call_ms(argv, args.calls, envs[name]))
            if args.batch:
                argv = [*crossdock, "submit", "--batch", str(batch)]
                times["submit --batch, per job"].append(per_call_ms(argv, 1, env) / args.batch)
    finally:
        if up is not None:
            up.terminate()
            up.wait(30)
        embedded.stop(tmp)
    med = {name: statistics.median(t) for name, t in times.items()}
    for name, ms in med.items():
        print(f"{name:>23}: {ms:7.2f} ms per call (rounds: {', '.join(f'{t:.0f}' for t in times[name])})")
    print(f"ratio crossdock submit / bare interpreter: {med['crossdock submit'] / med['bare interpreter']:.2f}x"
          " (target <= 2)")
    if args.socket:
        print(f"ratio submit via socket / bare interpreter: {med['submit via socket'] / med['bare interpreter']:.2f}x"
              " (target <= 2)")
    if args.batch and "sbatch" in med:
        print(f"ratio submit --batch per job / sbatch per call: {med['submit --batch, per job'] / med['sbatch']:.2f}x"
              " (target <= 1)")
    if args.baseline:
        print(f"ratio baseline submit / bare interpreter: {med['baseline submit'] / med['bare interpreter']:.2f}x")


if __name__ == "__main__":
    main()
