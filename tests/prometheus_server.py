"""A real Prometheus (Debian's ``prometheus``) on loopback scraping an exporter the test controls.

``scraped(tmp_path)`` yields ``(exporter registry, Prometheus URL)``: the test sets metrics in the
registry, Prometheus scrapes them every ``SCRAPE_SECONDS`` and answers PromQL over HTTP. A
missing binary skips the test locally and fails it under ``CI=true`` (scripts/setup.sh installs it).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import socket
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests.conftest import in_ci

SCRAPE_SECONDS = 0.5


def prometheus_binary() -> str:
    """Debian's prometheus (scripts/test.sh installs it); missing: a failure under CI=true, else a skip."""
    found = shutil.which("prometheus")
    if found is None:
        reason = "Debian's prometheus is not installed (bash scripts/test.sh installs it)"
        if in_ci():
            pytest.fail(f"{reason} under CI=true", pytrace=False)
        pytest.skip(reason)
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _get(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=2) as resp:  # noqa: S310 - loopback test server
        return json.loads(resp.read())


@contextlib.contextmanager
def scraped(tmp_path: Path) -> Iterator[tuple[object, str]]:
    from prometheus_client import CollectorRegistry, start_http_server

    binary = prometheus_binary()
    registry = CollectorRegistry()
    exporter, thread = start_http_server(0, addr="127.0.0.1", registry=registry)
    target = f"127.0.0.1:{exporter.server_port}"
    port = _free_port()
    config = tmp_path / "prometheus.yml"
    config.write_text(yaml.safe_dump({
        "global": {"scrape_interval": f"{int(SCRAPE_SECONDS * 1000)}ms",
                   "evaluation_interval": f"{int(SCRAPE_SECONDS * 1000)}ms"},
        "scrape_configs": [{"job_name": "services", "static_configs": [{"targets": [target]}]}],
    }))
    log = (tmp_path / "prometheus.log").open("wb")
    proc = subprocess.Popen([binary, f"--config.file={config}", f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                             f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                targets = _get(f"{url}/api/v1/targets")["data"]["activeTargets"]
                if targets and all(t["health"] == "up" for t in targets):
                    break
            except OSError:
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                log.flush()
                pytest.fail(f"prometheus did not scrape {target}: "
                            f"{(tmp_path / 'prometheus.log').read_text(errors='replace')[-2000:]}")
            time.sleep(0.2)
        yield registry, url
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        exporter.shutdown()
        exporter.server_close()
        thread.join(5)
