"""compose.yaml is accepted by the Docker Compose client and has the services users expect."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]


def compose_cli() -> list[str] | None:
    if shutil.which("docker"):
        probe = subprocess.run(["docker", "compose", "version"], capture_output=True)
        if probe.returncode == 0:
            return ["docker", "compose"]
    if shutil.which("docker-compose"):
        return ["docker-compose"]
    return None


def test_compose_client_accepts_the_file():
    cli = compose_cli()
    if cli is None:
        if os.environ.get("CI") == "true":
            pytest.fail("no Docker Compose client; scripts/test.sh installs Debian's docker-compose")
        pytest.skip("no Docker Compose client on this machine")
    r = subprocess.run([*cli, "-f", str(ROOT / "compose.yaml"), "config", "-q"], capture_output=True, text=True,
                       cwd=ROOT)
    assert r.returncode == 0, r.stderr


def test_services_and_redis_persistence():
    data = yaml.safe_load((ROOT / "compose.yaml").read_text())
    assert {"redis", "scheduler", "workers", "flower"} <= set(data["services"])
    redis = data["services"]["redis"]
    assert "--appendonly" in redis["command"] and "yes" in redis["command"]
    assert redis["healthcheck"]["test"][-1] == "ping"
    for name in ("scheduler", "workers", "flower"):
        assert data["services"][name]["build"] == "."
    assert all(p.startswith("127.0.0.1:") for p in data["services"]["flower"]["ports"])
