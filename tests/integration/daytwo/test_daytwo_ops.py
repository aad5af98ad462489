"""Day two for an operator: ``crossdock up`` stops cleanly and quietly, the demo leaves nothing
running, and the metrics every process serves are in Prometheus' file-discovery targets."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import httpx
import pytest
import yaml

from crossdock.backends.local import spawner
from crossdock.backends.redis_store import embedded
from crossdock.queue.states import JobState
from tests.conftest import in_ci
from tests.integration.local.rest import ApiServer, make_token
from tests.integration.local.test_dashboard import browser, gpu_pools, shoot  # noqa: F401
from tests.integration.local.test_up import Up, client_runtime, run_job, up_env  # noqa: F401
from tests.waiting import eventually as wait_until

pytestmark = [pytest.mark.daytwo]

GUARD_SECONDS = 60.0
"""A deadline that only a hang reaches: the conditions are waited on, not timed."""


def processes_of(state: Path) -> dict[int, str]:
    """Live processes started for this state directory (``crossdock up``, its workers and their pool
    children, the router, the local spawner, the embedded Redis): pid → command line."""
    found = {}
    marker = f"CROSSDOCK_STATE_DIR={state}\0".encode()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            cmdline = (entry / "cmdline").read_bytes()
            zombie = "State:\tZ" in (entry / "status").read_text()
        except OSError:
            continue
        if not zombie and (marker in environ or str(state).encode() in cmdline):
            found[int(entry.name)] = cmdline.replace(b"\0", b" ").decode(errors="replace")
    return found


def discovered(state: Path, role: str) -> list[str]:
    """The targets of ``role`` in the state directory's Prometheus file-discovery files."""
    return [t for f in (state / "metrics" / "targets").glob(f"{role}-*.json")
            for group in json.loads(f.read_text()) for t in group["targets"]]


def gone(state: Path) -> dict[int, str]:
    """Waits until no process of ``state`` is left (a guard deadline only against a hang); those left."""
    deadline = time.monotonic() + GUARD_SECONDS
    while (left := processes_of(state)) and time.monotonic() < deadline:
        time.sleep(0.1)
    return left


@pytest.mark.redis
@pytest.mark.celery
def test_up_lists_its_router_for_prometheus_and_after_sigterm_leaves_no_process_nor_banner(up_env, tmp_path, monkeypatch):
    state, env = up_env
    log = tmp_path / "up.log"
    up = Up(state, env, log)
    rt = client_runtime(state, env, monkeypatch)
    assert run_job(rt, tmp_path) is JobState.COMPLETED  # the worker dispatched it through the spawner
    started = processes_of(state)
    assert any("crossdock.backends.local.spawner" in c for c in started.values()), started
    assert any("crossdock.workers.worker" in c for c in started.values()), started
    assert embedded.pid(state) in started
    router_port = wait_until("the router to report its metrics port",  # Prometheus finds it by file discovery
                             lambda: json.loads((state / "router.json").read_text() or "{}").get("metrics_port")
                             if (state / "router.json").exists() else None, GUARD_SECONDS)
    assert f"127.0.0.1:{router_port}" in discovered(state, "router"), discovered(state, "router")
    with urllib.request.urlopen(f"http://127.0.0.1:{router_port}/metrics", timeout=10) as answer:
        assert answer.status == 200

    up.proc.send_signal(signal.SIGTERM)
    assert up.proc.wait(GUARD_SECONDS) == 0, log.read_text()[-3000:]
    assert not spawner.socket_path(state).exists()  # stopped by up, not left to wait out its idle time
    assert gone(state) == {} and embedded.pid(state) is None
    assert discovered(state, "router") == []  # its target removed with it
    out = log.read_text()
    assert "crossdock up: stopped in" in out and "embedded Redis stopped" in out, out[-3000:]
    for noise in ("SecurityWarning", "-------------- celery@", "[queues]", "superuser privileges"):
        assert noise not in out, f"{noise!r} in up's output:\n{out[-3000:]}"


def run_demo(tmp_path: Path, *args: str, **extra_env: str) -> str:
    """``crossdock demo ARGS`` as a new user runs it (its own state directory, no crossdock variable
    but ``extra_env``): its output, once it exited 0, left no process of its state directory running
    and printed neither noise nor its embedded Redis' password."""
    state = tmp_path / "state"
    env = {k: v for k, v in os.environ.items() if not k.startswith("CROSSDOCK_")}
    env.update(CROSSDOCK_STATE_DIR=str(state), **extra_env)
    try:
        r = subprocess.run([sys.executable, "-m", "crossdock", "demo", *args], env=env, cwd=tmp_path,
                           capture_output=True, text=True, timeout=280)  # under the suite's 300 s per test
        left = gone(state)
    finally:
        for pid in processes_of(state):  # only if the demo failed half-way
            os.kill(pid, signal.SIGKILL)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-4000:]
    assert left == {} and embedded.pid(state) is None
    for noise in ("killing it", "SecurityWarning", "Traceback"):
        assert noise not in out, f"{noise!r} in the demo's output:\n{out[-4000:]}"
    password = embedded.password_path(state).read_text().strip()
    assert password and password not in out  # masked wherever the demo shows its Redis
    return out


def assert_lines(out: str, *lines: str) -> None:
    for line in lines:
        assert line in out, f"{line!r} not in the demo's output:\n{out[-4000:]}"


def assert_service_followed_traffic(out: str) -> None:
    """Step 5: one replica at the low load, then ceil(10 / 4) = 3 (one more at most) once it stepped up."""
    assert_lines(out, "step 5: a service follows traffic", "at 2 requests/s: 1 replica ready, 1 wanted",
                 "chat deleted: its replicas drained and stopped")
    stepped = re.search(r"chat: 1 → (\d+) replicas ready as its load stepped from 2 to 10 requests/s;"
                        r" (\d+)/(\d+) requests answered", out)
    assert stepped, out[-4000:]
    assert 3 <= int(stepped[1]) <= 4 and stepped[2] == stepped[3] != "0", stepped[0]
    assert re.search(r"chat: \d → [34] replicas: [\d.]+ qps / 4 per replica", out), out[-4000:]


def assert_gpus_on_the_fragmentation_view(out: str) -> None:
    """Step 6: the small jobs' ids on one node's GPUs, the other node free, then the 4-GPU job there."""
    rows = dict(re.findall(r"^gpu +(gpu-[ab]) +(.+?) *$", out, re.MULTILINE))
    assert set(rows) == {"gpu-a", "gpu-b"}, out[-4000:]
    (busy, ids), = [(node, gpus.split()) for node, gpus in rows.items() if "·" not in gpus]
    free, = set(rows) - {busy}
    assert len(ids) == 4 and all(i.isdigit() for i in ids) and len(set(ids)) == 3, rows  # 1 + 1 + 2 GPUs
    assert rows[free].split() == ["·"] * 4, rows
    assert re.search(r"^gpu +A100 +4/8 +4 +4 +4 +2 +1 +0 *$", out, re.MULTILINE), out[-4000:]  # one 4-GPU block
    assert_lines(out, f"GPUs) placed on {free}: {' '.join(f'{free}:{k}' for k in range(4))}, the node binpack kept whole",
                 "gpu: 4/4 jobs completed")


@pytest.mark.redis
@pytest.mark.celery
def test_the_demo_tells_each_step_of_the_story_and_leaves_nothing_running(tmp_path):
    out = run_demo(tmp_path)
    assert_lines(out, "step 1: one queue", "states: CANCELLED 1, COMPLETED 12, FAILED 1",
                 "step 2: one queue, two backends — skipped: no local Slurm cluster",
                 "`crossdock dev slurm up` adds it",
                 "step 3: preemption", "was preempted 1 time(s)", "ended COMPLETED on attempt 2",
                 "step 4: elastic queue", "etl: 8/8 jobs completed", "went back to 0",
                 "step 6: GPU placement",
                 "demo finished as expected", "embedded Redis stopped")
    assert_service_followed_traffic(out)
    assert_gpus_on_the_fragmentation_view(out)


@pytest.mark.redis
@pytest.mark.celery
@pytest.mark.slurm
def test_the_demo_spreads_one_queue_over_this_machine_and_the_local_slurm_cluster(tmp_path, slurm_cluster):
    out = run_demo(tmp_path, "--step", "2", CROSSDOCK_SLURM_ENV=slurm_cluster["CROSSDOCK_SLURM_ENV"])
    assert "step 1:" not in out and "step 3:" not in out  # that step alone
    assert_lines(out, "step 2: one queue, two backends — the hybrid queue spans this machine and the cpu partition"
                 " of the local Slurm cluster", "binpacked over its pools local (local) and hpc (slurm)",
                 "hybrid: 3/3 jobs completed, on 2 of its 2 pools", "demo finished as expected")
    assert re.search(r"^  local \(local\): jobs [\d, ]+ on localhost$", out, re.MULTILINE), out[-4000:]
    assert re.search(r"^  hpc \(slurm\): jobs [\d, ]+ on cpu[12](, cpu[12])?$", out, re.MULTILINE), out[-4000:]


# --- the Helm chart: one signing key for every pod ------------------------------------------------
CHART = Path(__file__).resolve().parents[3] / "deploy" / "helm" / "crossdock"
KEY_FILE = "/etc/crossdock-signing/hmac.key"


@pytest.fixture(scope="module")
def helm_binary() -> Path:
    from crossdock.dev import helm

    try:  # built by scripts/helm/build.sh (minutes); CI builds it, a laptop run uses it when cached
        return helm.binary(build=in_ci())
    except helm.HelmUnavailable as err:
        if in_ci():
            pytest.fail(str(err), pytrace=False)
        pytest.skip(str(err))


def rendered(helm: Path, *args: str) -> list[dict]:
    out = subprocess.run([str(helm), "template", "t", str(CHART), "--namespace", "crossdock", *args],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return [d for d in yaml.safe_load_all(out.stdout) if d]


def pod_specs(docs: list[dict]) -> dict[str, dict]:
    """The pod spec of every Deployment and of the test hook's Pod, by name."""
    specs = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs if d["kind"] == "Deployment"}
    specs.update({d["metadata"]["name"]: d["spec"] for d in docs if d["kind"] == "Pod"})
    return specs


def reads_the_key(spec: dict, secret: str) -> bool:
    volume = next((v["name"] for v in spec.get("volumes", []) if v.get("secret", {}).get("secretName") == secret), None)
    return all(volume is not None and {"name": volume, "mountPath": KEY_FILE.rsplit("/", 1)[0], "readOnly": True}
               in c.get("volumeMounts", []) and {"name": "CROSSDOCK_MASTER_KEY_FILE", "value": KEY_FILE} in c["env"]
               for c in spec["containers"])


@pytest.mark.parametrize("values, secret", [([], "t-crossdock-signing-key"),
                                            (["--set", "signingKey.existingSecret=mine"], "mine")],
                         ids=["release-secret", "existing-secret"])
def test_every_pod_of_the_chart_reads_one_signing_key_from_a_secret(helm_binary, values, secret):
    docs = rendered(helm_binary, *values)
    specs = pod_specs(docs)
    redis = {n for n in specs if n.endswith("-redis")}
    assert {n for n, s in specs.items() if n not in redis and not reads_the_key(s, secret)} == set()
    assert any(n.endswith("-worker-k8s") for n in specs) and any(n.endswith("-test-jobs") for n in specs)
    made = [d for d in docs if d["kind"] == "Secret" and d["metadata"]["name"] == "t-crossdock-signing-key"]
    if secret == "mine":
        assert made == []
    else:
        assert len(base64.b64decode(made[0]["data"]["hmac.key"])) == 32
        assert made[0]["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"


def test_the_charts_test_hook_runs_a_python_job_beside_a_shell_one(helm_binary):
    pod = next(d for d in rendered(helm_binary) if d["kind"] == "Pod" and d["metadata"]["name"].endswith("-test-jobs"))
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = pod["spec"]["containers"][0]["command"][-1]
    compile(script, "test-jobs", "exec")  # the hook's script is valid Python
    assert ".submit(sum, [1, 2, 3])" in script and "submit_command" in script


# --- the dashboard: a services panel, a pool column, long reasons cut to their cell ---------------
LONG_WHY = ("Unschedulable: 0/2 nodes of pool a100 have 8 free A100 GPUs on one node (free GPUs are spread"
            " over gpu-a and gpu-b), no preemptible job of a lower priority frees enough, pool l4 has no A100") * 2


@pytest.mark.redis
@pytest.mark.celery
@pytest.mark.operate
def test_the_dashboard_shows_services_the_pool_of_each_job_and_cuts_long_reasons(gpu_pools, runtime, cluster,
                                                                                  browser, tmp_path):
    from crossdock.queue.serving import ServiceSpec, ServiceState

    runtime.store.services.put(ServiceSpec(name="chat", user="root", queue="inference", command=["sleep", "600"]))
    server = ApiServer(runtime, send=cluster.send)
    headers = make_token(runtime.store, "root")
    client = httpx.Client(base_url=server.url, headers=headers, timeout=30)
    try:
        r = client.post("/v1/jobs", json={"chdir": str(tmp_path), "name": "pretrain", "command": ["sleep", "120"],
                                          "queue": "training", "gpus": {"count": 2}})
        assert r.status_code == 201, r.text
        job = r.json()["job_id"]
        cluster.wait(job, {JobState.RUNNING})
        runtime.store.update_if(job, (JobState.RUNNING,), {"reason": LONG_WHY})  # as long as the longest ones
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(f"{server.url}/?interval=300#token={headers['Authorization'].removeprefix('Bearer ')}")
        row = page.locator('#services tr[data-service="chat"]')
        row.wait_for(timeout=30_000)
        cells = [c.strip() for c in row.locator("td").all_inner_texts()]
        assert cells[:3] == ["chat", "root", "inference"] and cells[3] in {s.value for s in ServiceState}, cells
        page.wait_for_selector(f"#job-{job} td.pool", timeout=30_000)
        assert page.inner_text(f"#job-{job} td.pool") == "local/a100"
        page.wait_for_selector(f"#job-{job} td.reason[title]", timeout=30_000)
        why = page.locator(f"#job-{job} td.reason")
        assert why.get_attribute("title") == LONG_WHY  # whole on hover
        # cut to its cell, read on the page as it stands (the table is redrawn every 300 ms: an element
        # taken out between finding it and measuring it measures 0 wide)
        page.wait_for_function(f"""() => {{
            const c = document.querySelector('#job-{job} td.reason .cut');
            return c !== null && c.isConnected && c.clientWidth > 0 && c.scrollWidth > c.clientWidth;
        }}""", timeout=30_000)
        nodes = page.locator(f"#job-{job} td:nth-child(8)")
        assert nodes.inner_text().startswith("gpu-")
        # the nodes column stays on screen at 1400 px (measured on the live page, as above)
        page.wait_for_function(f"""() => {{
            const n = document.querySelector('#job-{job} td:nth-child(8)');
            if (n === null || !n.isConnected) return false;
            const box = n.getBoundingClientRect();
            return box.width > 0 && box.right <= 1400;
        }}""", timeout=30_000)
        shoot(page, tmp_path, "dashboard-services.png")
    finally:
        ids = runtime.store.all_ids()
        client.post(f"/v1/jobs/{','.join(map(str, ids))}/cancel")
        cluster.wait_all(ids, timeout=60)
        client.close()
        server.close()
