"""Per-call time of the commands scripts run in loops, against a bare interpreter start
(``sys.executable -I -S -c pass``: this interpreter itself, no site, no PATH lookup or pyenv shim)
in the same run, rounds interleaved so that a busy machine weighs on both alike; with the local
Slurm cluster up (``python -m crossdock.dev.slurm up``, or SLURM_CONF naming another), against
``sbatch --hold --wrap true`` too (held jobs, cancelled at the end).

    python bench/bench_submit_latency.py [--calls 20] [--rounds 3] [--baseline CHECKOUT] [--batch N] [--socket]

``crossdock submit --wrap true -H`` is timed on the full path (``CROSSDOCK_SOCKET=none``: the
process parses, admits and stores itself).

``--socket`` starts ``crossdock up --workers 0`` on the same store (jobs held, so nothing runs)
and times the CLI's fast path (``crossdock.cli.thin``, through the socket ``up`` serves its
owner) for ``submit --hold``, ``queue`` and ``cancel ID`` (a held job each call), and the full
path of ``queue`` and ``cancel`` beside them.

``--baseline`` times another checkout's ``crossdock submit`` too (PYTHONPATH=CHECKOUT), for
before/after figures taken under the same load.

``--batch N`` times ``crossdock submit --batch FILE`` with N submissions per call too, as
milliseconds per job (target: at most sbatch's per call).

Prints the median per-call milliseconds of each and its ratio to the bare interpreter
(target: <= 2) and to sbatch. The store is an embedded Redis in a temporary directory.
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
LOOP_EACH = 'f=$1; shift; while read -r x; do "$@" "$x" >/dev/null 2>&1 || exit 1; done < "$f"'
"""The same, once per line of a file, that line as the last argument (a job id)."""


def per_call_ms(argv: list[str], calls: int, env: dict[str, str], each: Path | None = None) -> float:
    """Milliseconds per call of ``argv`` run ``calls`` times by one shell loop (with ``each``: once
    per line of that file, the line appended)."""
    loop = [LOOP, "sh", str(calls)] if each is None else [LOOP_EACH, "sh", str(each)]
    t0 = time.perf_counter()
    subprocess.run(["/bin/sh", "-c", *loop, *argv], check=True, env=env)
    return (time.perf_counter() - t0) * 1000 / calls


def slurm_env() -> dict[str, str] | None:
    """The local Slurm cluster's client variables when it answers (SLURM_CONF from the environment
    first), else None."""
    if not shutil.which("sbatch"):
        return None
    env = dict(os.environ)
    if not env.get("SLURM_CONF"):
        from crossdock.dev.slurm.cluster import ClusterError, read_env

        try:
            env.update(read_env())
        except ClusterError:
            return None
    up = subprocess.run(["sinfo", "-h", "-o", "%P"], env=env, capture_output=True, timeout=20)
    return env if up.returncode == 0 else None


def held_jobs(crossdock: list[str], env: dict[str, str], n: int, path: Path) -> Path:
    """``n`` held jobs submitted in one batch; their ids in ``path``, one a line."""
    batch = path.with_suffix(".batch")
    batch.write_text("--hold --wrap=true\n" * n)
    done = subprocess.run([*crossdock, "submit", "--batch", str(batch), "--parsable"], env=env, check=True,
                          capture_output=True, text=True)
    path.write_text(done.stdout)
    return path


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=20, help="calls per loop")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", type=Path, help="a checkout whose crossdock submit to time as well")
    ap.add_argument("--socket", action="store_true", help="start crossdock up and time the CLI's fast path")
    ap.add_argument("--batch", type=int, default=0, help="submissions per `submit --batch` call (0: not timed)")
    args = ap.parse_args()

    from bench_submit import bench_store

    from crossdock.backends.redis_store import embedded

    tmp, store_env = bench_store()
    env = {**os.environ, **store_env}
    exe = Path(sys.executable).with_name("crossdock")
    crossdock = [str(exe)] if exe.exists() else [sys.executable, "-m", "crossdock"]
    full = {**env, "CROSSDOCK_SOCKET": "none"}
    fast = {k: v for k, v in env.items() if k != "CROSSDOCK_SOCKET"}
    rows: dict[str, tuple[list[str], dict[str, str], bool]] = {  # name: argv, env, one held job id per call
        "bare interpreter": ([sys.executable, "-I", "-S", "-c", "pass"], full, False),
        "crossdock submit": ([*crossdock, "submit", "--wrap", "true", "-H"], full, False),
    }
    slurm = slurm_env()
    sbatch_name = f"crossdock-bench-{os.getpid()}"
    if slurm is not None:
        rows["sbatch --hold"] = (["sbatch", "--hold", "--wrap", "true", "-o", "/dev/null", "-J", sbatch_name],
                                 slurm, False)
    else:
        print("no Slurm cluster answers (python -m crossdock.dev.slurm up, or SLURM_CONF): sbatch not timed")
    up = None
    if args.socket:
        from crossdock.cli.thin import user_socket

        sock = Path(user_socket(str(tmp)))
        up = subprocess.Popen([*crossdock, "up", "--workers", "0"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env=fast)
        deadline = time.monotonic() + 120
        while not sock.is_socket():
            if time.monotonic() > deadline or up.poll() is not None:
                up.terminate()
                up.wait(30)
                embedded.stop(tmp)
                raise SystemExit(f"--socket: crossdock up did not open its socket {sock}")
            time.sleep(0.2)
        rows["submit (fast path)"] = (rows["crossdock submit"][0], fast, False)
        rows["queue (full path)"] = ([*crossdock, "queue"], full, False)
        rows["queue (fast path)"] = ([*crossdock, "queue"], fast, False)
        rows["cancel (full path)"] = ([*crossdock, "cancel"], full, True)
        rows["cancel (fast path)"] = ([*crossdock, "cancel"], fast, True)
    if args.baseline:
        rows["baseline submit"] = (rows["crossdock submit"][0], {**full, "PYTHONPATH": str(args.baseline.resolve())},
                                   False)
    times: dict[str, list[float]] = {name: [] for name in rows}
    batch = Path(tmp) / "batch.txt"
    batch.write_text("--wrap=true\n" * args.batch)
    if args.batch:
        times["submit --batch, per job"] = []
    try:
        for r in range(args.rounds):
            for name, (argv, row_env, per_job) in rows.items():
                each = held_jobs(crossdock, full, args.calls, Path(tmp) / f"ids-{r}-{len(times[name])}") \
                    if per_job else None
                times[name].append(per_call_ms(argv, args.calls, row_env, each))
            if args.batch:
                argv = [*crossdock, "submit", "--batch", str(batch)]
                times["submit --batch, per job"].append(per_call_ms(argv, 1, full) / args.batch)
    finally:
        if up is not None:
            up.terminate()
            up.wait(30)
        if slurm is not None:
            subprocess.run(["scancel", "-n", sbatch_name], env=slurm, capture_output=True, timeout=60)
        embedded.stop(tmp)
    med = {name: statistics.median(t) for name, t in times.items()}
    bare, sbatch = med["bare interpreter"], med.get("sbatch --hold")
    for name, ms in med.items():
        ratios = "" if name == "bare interpreter" else f"  {ms / bare:5.2f}x bare interpreter"
        if sbatch and name not in ("bare interpreter", "sbatch --hold"):
            ratios += f", {ms / sbatch:5.2f}x sbatch"
        print(f"{name:>23}: {ms:7.2f} ms per call{ratios} (rounds: {', '.join(f'{t:.0f}' for t in times[name])})")
    print(f"ratio crossdock submit / bare interpreter: {med['crossdock submit'] / bare:.2f}x (target <= 2)")
    for name in ("submit (fast path)", "queue (fast path)", "cancel (fast path)"):
        if name in med:
            print(f"ratio {name} / bare interpreter: {med[name] / bare:.2f}x (target <= 2)")
    if args.batch and sbatch:
        print(f"ratio submit --batch per job / sbatch per call: {med['submit --batch, per job'] / sbatch:.2f}x"
              " (target <= 1)")

if __name__ == "__main__":
    main()
