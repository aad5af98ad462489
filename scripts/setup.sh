#!/usr/bin/env bash
# Install crossdock and what it needs on a fresh Debian machine (as root): Python venv in .venv,
# the package with its dev extras, and Debian's redis-server for the embedded default.
# Idempotent; a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

need_apt=()
command -v python3 >/dev/null || need_apt+=(python3)
python3 -c 'import ensurepip, venv' 2>/dev/null || need_apt+=(python3-venv)
command -v redis-server >/dev/null || need_apt+=(redis-server)
command -v openssl >/dev/null || need_apt+=(openssl)
if ((${#need_apt[@]})); then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${need_apt[@]}" >/dev/null
fi

if [ ! -x .venv/bin/python ]; then
  python3 -m venv .venv
fi
stamp=.venv/.crossdock-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -e '.[dev]'
  touch "$stamp"
fi
echo "crossdock installed in $(pwd)/.venv ($(.venv/bin/crossdock --help >/dev/null && echo ok))"
