"""The dashboard in a real browser: Debian's headless Chromium, driven by Playwright, against the
API over a running crossdock (scheduler and Celery worker). The page loads, shows a submitted
job, and updates when it finishes; without a token it asks for one.

Screenshots go to the test's directory, and to ``CROSSDOCK_SCREENSHOTS`` when set (the ones in
docs/img are made so: ``CROSSDOCK_SCREENSHOTS=docs/img pytest tests/integration/local/test_dashboard.py``).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import httpx
import pytest
import yaml

from crossdock.queue.states import JobState
from tests.conftest import TEST_CONFIG, in_ci
from tests.integration.local.rest import ApiServer, make_token

pytestmark = [pytest.mark.operate, pytest.mark.redis, pytest.mark.celery]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        message = "Debian's chromium is not installed (scripts/setup.sh installs it)"
        if in_ci():
            pytest.fail(message, pytrace=False)
        pytest.skip(message)
    return found


@pytest.fixture
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium(), args=["--no-sandbox", "--disable-gpu"])
        yield b
        b.close()


def shoot(page, tmp_path: Path, name: str) -> None:
    page.screenshot(path=str(tmp_path / name), full_page=True)
    if os.environ.get("CROSSDOCK_SCREENSHOTS"):
        shutil.copy(tmp_path / name, Path(os.environ["CROSSDOCK_SCREENSHOTS"]) / name)


CONFIG = {
    **TEST_CONFIG,
    "pools": {
        "a100": {"backend": "local", "nodes": [{"name": f"gpu-{x}", "cpus": 32, "memory_mib": 65536, "gpus": 8,
                                                 "gpu_model": "A100"} for x in "ab"]},
        "l4": {"backend": "local", "nodes": [{"name": f"l4-{x}", "cpus": 16, "memory_mib": 32768, "gpus": 4,
                                               "gpu_model": "L4"} for x in "ab"]},
    },
    "queues": {
        "training": {"priority_class": "training", "pools": ["a100"], "placement": "binpack", "per_job": {"gpu": 8}},
        "inference": {"priority_class": "inference", "pools": ["a100"], "placement": "binpack"},
        "preprocessing": {"priority_class": "preprocessing", "pools": ["l4"], "placement": "most-requested"},
    },
}
"""Two pools of GPU nodes (all run here, by the local backend), so that the page has GPUs in use
by model, free ones spread over nodes, and a preemption to show."""


@pytest.fixture
def gpu_pools(crossdock_env):
    Path(crossdock_env["CROSSDOCK_CONFIG"]).write_text(yaml.safe_dump(CONFIG))


def test_the_dashboard_shows_a_submitted_job_and_its_end(gpu_pools, runtime, cluster, browser, tmp_path):
    server = ApiServer(runtime, send=cluster.send)
    headers = make_token(runtime.store, "root")
    client = httpx.Client(base_url=server.url, headers=headers, timeout=30)

    def submit(name: str, body: dict) -> int:
        r = client.post("/v1/jobs", json={"chdir": str(tmp_path), "name": name, **body})
        assert r.status_code == 201, r.text
        return r.json()["job_id"]

    long = {"command": ["sleep", "120"]}
    try:
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{server.url}/?interval=300#token={headers['Authorization'].removeprefix('Bearer ')}")
        page.wait_for_selector("body[data-updated]")
        assert "token=" not in page.url  # the token left the address bar
        assert page.inner_text("#who") == "root"  # a token without --admin: root by name only
        assert page.locator('#queues tr[data-queue="training"]').count() == 1
        # training fills gpu-a (3+3+2) and half of gpu-b; an inference job of 6 GPUs then fits
        # nowhere but by preempting gpu-b's training job
        for name, gpus in (("pretrain-a", 3), ("pretrain-b", 3), ("finetune", 2), ("sweep-7", 4)):
            submit(name, {**long, "queue": "training", "gpus": {"count": gpus}})
            cluster.wait(max(runtime.store.all_ids()), {JobState.RUNNING})
        job = submit("embed-batch", {"command": ["sleep", "3"], "gpus": {"count": 1}})
        row = page.locator(f"#job-{job}")
        row.wait_for(timeout=30_000)  # the page shows the submitted job
        assert "embed-batch" in row.inner_text()
        submit("serve-llm", {**long, "queue": "inference", "gpus": {"count": 6}})
        held = submit("nightly-eval", {"command": ["true"], "hold": True})
        page.wait_for_selector(f'#job-{job}[data-state="RUNNING"]', timeout=30_000)
        page.wait_for_selector('#disruptions td:text-is("preemption")', timeout=30_000)
        page.wait_for_selector('[data-pool="a100"] [data-model="A100"]', timeout=10_000)
        shoot(page, tmp_path, "dashboard-running.png")
        page.click(f"#job-{held}")  # a pending job: why it pends (GET /v1/jobs/{id}/why)
        page.wait_for_selector("#why-section:not([hidden])", timeout=10_000)
        page.wait_for_function("document.getElementById('why-reason').textContent.startsWith('JobHeldUser')",
                               timeout=10_000)
        assert page.inner_text("#why-job") == str(held)
        cluster.wait(job, timeout=60)
        assert runtime.store.get(job).state is JobState.COMPLETED
        # the page updates when the job finishes
        page.wait_for_selector(f'#job-{job}[data-state="COMPLETED"]', timeout=30_000)
        assert "COMPLETED" in row.inner_text()
        shoot(page, tmp_path, "dashboard-finished.png")

        anonymous = browser.new_page()
        anonymous.goto(server.url)
        anonymous.wait_for_selector("#login:not([hidden])", timeout=15_000)
        assert "no credentials" in anonymous.inner_text("#status")
    finally:
        ids = runtime.store.all_ids()
        client.post(f"/v1/jobs/{','.join(map(str, ids))}/cancel")
        cluster.wait_all(ids, timeout=60)  # no sleep left running
        client.close()
        server.close()
