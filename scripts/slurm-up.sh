#!/usr/bin/env bash
# Start the local 4-node Slurm 22.05 cluster (installs Debian's packages on first use) and
# print how to use it. Same as `python -m crossdock.dev.slurm up`; extra args go to it
# (`--dir DIR`, `--no-rest`). Stop it with `python -m crossdock.dev.slurm down`.
set -euo pipefail
cd "$(dirname "$0")/.."
py=python3
[ -x .venv/bin/python ] && py=.venv/bin/python
exec "$py" -m crossdock.dev.slurm up "$@"
