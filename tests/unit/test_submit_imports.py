"""``crossdock submit`` runs in loops, as sbatch does: its path must not load the Typer app, rich,
the scheduler, Celery or the dev tools (bench/bench_submit_latency.py measures what it costs)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("typer", "click", "rich", "celery", "kombu", "numpy", "crossdock.queue.scheduler", "crossdock.workers",
         "crossdock.dev", "crossdock.cli.app")


def test_the_submit_path_loads_none_of_the_heavy_modules(tmp_path):
    code = ("import sys; sys.argv = ['crossdock', 'submit', '--help']\n"
            "from crossdock.cli.main import main\n"
            "try:\n    main()\nexcept SystemExit:\n    pass\n"
            f"heavy = {HEAVY!r}\n"
            "print(sorted(m for m in sys.modules if any(m == h or m.startswith(h + '.') for h in heavy)))")
    # --help stops before the store; the modules a real submit imports are all imported at the top of
    # crossdock.cli.submit, so this is the whole path but for what the store and admission load lazily.
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=ROOT,
                         env={"PATH": "/usr/bin:/bin", "CROSSDOCK_STATE_DIR": str(tmp_path)}).stdout
    assert out.strip().splitlines()[-1] == "[]", out
