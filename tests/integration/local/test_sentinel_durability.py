"""What a Sentinel failover loses of the writes crossdock acknowledged, without and with durable
writes (``wait_replicas`` in the store's URL, :mod:`crossdock.backends.redis_store.durability`).

The fault, as Jepsen stages one: the replica lags (SIGSTOPped, as a slow disk, a long pause or a
partition leaves it) while submissions go on; a large write fills the replication link first, so
what the master acknowledges from then on waits in the master's own buffer; the master is
SIGKILLed; the replica resumes and the sentinels promote it. Each submission is an op of a history
(Jepsen's invoke / ok / info), judged at the end by the chaos checker against the store's final
read:

- without durable writes, every submission acknowledged while the replica lagged is lost, and
  the checker says so (``lost``, one per job);
- with ``wait_replicas=1``, those submissions are not acknowledged (``NotReplicated``: their
  outcome unknown, as for a connection lost before the reply); retried after the failover (and
  after the old master has come back as a replica: with none, no write is acknowledged) with their
  idempotency tokens, each is stored exactly once, and the history is valid.
"""

from __future__ import annotations

import signal
import threading
import uuid

import pytest
import yaml

from crossdock import service
from crossdock.queue.errors import StoreUnavailable
from crossdock.queue.models import JobSpec
from crossdock.runtime import Runtime
from tests.chaos.checker import check
from tests.chaos.history import History, observe_store
from tests.chaos.history import submit as record_submit
from tests.conftest import TEST_CONFIG
from tests.integration.local.redis_ha import ha  # noqa: F401 (a fixture)
from tests.waiting import eventually

pytestmark = [pytest.mark.operate, pytest.mark.redis]

SAFE, LAGGING, AFTER = 8, 6, 4
"""Submissions before the replica lags, while it lags (one thread each), and after the failover."""
WAIT_TIMEOUT_MS = 300
FILLER_BYTES = 48 * 2**20
"""More than loopback's socket buffers hold (a few MiB), less than the master's 64 MiB soft limit
for a replica's output buffer."""


def key_of(job):
    return job.spec.name


class Submitter:
    """One job a submission, each with its own idempotency token, recorded in ``history``."""

    def __init__(self, rt: Runtime, history: History, workdir: str):
        self.rt, self.history, self.workdir = rt, history, workdir
        self.unknown: dict[str, str] = {}  # key -> token of a submission whose outcome is unknown
        self.errors: list[str] = []

    def submit(self, key: str, token: str | None = None) -> bool:
        token = token or uuid.uuid4().hex
        spec = JobSpec(command=["true"], workdir=self.workdir, name=key)
        try:
            record_submit(self.history, [key], lambda: service.submit(self.rt, [spec], token=token), key_of,
                          (StoreUnavailable,))
        except StoreUnavailable as exc:
            self.errors.append(f"{key}: {exc}")
            self.unknown[key] = token
            return False
        self.unknown.pop(key, None)
        return True

    def stored(self, key: str, timeout: float = 30) -> None:
        """Submitted until acknowledged, with one token, as a client retries (a durable write may
        wait past its timeout on a loaded machine: not acknowledged, tried again)."""
        token = self.unknown.get(key) or uuid.uuid4().hex
        eventually(f"{key} to be stored", lambda: self.submit(key, token), timeout,
                   why=lambda: "\n".join(self.errors[-5:]))


@pytest.mark.parametrize("durable", [False, True], ids=["async", "wait_replicas=1"])
def test_a_failover_loses_the_writes_a_lagging_replica_missed_unless_they_are_durable(ha, tmp_path, monkeypatch,
                                                                                       durable):
    cfg = tmp_path / "crossdock.yaml"
    cfg.write_text(yaml.safe_dump(TEST_CONFIG))
    url = ha.url + (f"?wait_replicas=1&wait_timeout_ms={WAIT_TIMEOUT_MS}" if durable else "")
    for k, v in {"CROSSDOCK_REDIS_URL": url, "CROSSDOCK_STATE_DIR": str(tmp_path / "state"),
                 "CROSSDOCK_CONFIG": str(cfg), "CROSSDOCK_PREFIX": f"dw{uuid.uuid4().hex[:8]}"}.items():
        monkeypatch.setenv(k, v)
    rt = Runtime.from_env()
    history = History()
    client = Submitter(rt, history, str(tmp_path))
    for i in range(SAFE):
        client.stored(f"safe-{i}")
    first_master, master, replica = ha.master_port(), ha.client("master"), ha.procs["replica"]

    offset = master.info("replication")["master_repl_offset"]  # the safe ones are on the replica
    eventually("the replica to catch up", lambda: ha.client("replica").info("replication")["slave_repl_offset"]
               >= offset, 30)
    history.fault("the replica lags; the replication link is full")
    replica.send_signal(signal.SIGSTOP)
    try:
        master.set(f"filler-{uuid.uuid4().hex}", b"x" * FILLER_BYTES)  # the test's own key, not the store's
        threads = [threading.Thread(target=client.submit, args=(f"lagging-{i}",)) for i in range(LAGGING)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        history.fault("kill the master")
        ha.procs["master"].send_signal(signal.SIGKILL)
        ha.procs["master"].wait()
    finally:
        replica.send_signal(signal.SIGCONT)
    eventually("the sentinels to promote the replica", lambda: ha.master_port() != first_master, 60)
    promoted = ha.master_port()
    eventually("every sentinel to name the promoted master", lambda: ha.sentinels_agree(promoted), 60)
    history.fault("the old master restarts, as a replica of the promoted one")
    # Without persistence it restarts empty: as a master it could be synced from (Redis' own
    # warning), so it comes back as a replica. Durable writes need a replica again.
    ha.restart("master", ["--replicaof", "127.0.0.1", str(promoted)])
    eventually("the old master to replicate the new one", lambda: ha.replicas_of_master() == 1, 60)

    for key in sorted(client.unknown):  # a client retries what it was not told
        client.stored(key)
    for i in range(AFTER):
        client.stored(f"after-{i}")
    jobs = observe_store(history, rt.store, key_of)
    for job in jobs:  # nothing runs them: each ends so that the checker judges a finished history
        rt.store.cancel(job.id)
    history.ops[:] = [op for op in history.ops if op.process != "store"]
    observe_store(history, rt.store, key_of)
    verdict = check(history)
    acked = sum(1 for op in history.ops if op.f == "submit" and op.type == "ok")
    lost = [a for a in verdict.anomalies if a.rule == "lost"]
    lagging = {key for op in history.ops if op.f == "submit" and op.type == "ok" for key in op.value
               if key.startswith("lagging-")}
    print(f"{'durable' if durable else 'async'}: {len(lost)} of {acked} acknowledged submissions lost in the"
          f" failover; {verdict.summary()}")
    if durable:
        assert verdict.ok, verdict.report()
        assert lagging == {f"lagging-{i}" for i in range(LAGGING)}  # each acknowledged once retried
        assert rt.store.durable_writes()["ok"]  # `crossdock health`: a replica again
        assert sorted(key_of(j) for j in rt.store.get_many(rt.store.all_ids())) == sorted(
            [f"safe-{i}" for i in range(SAFE)] + [f"lagging-{i}" for i in range(LAGGING)]
            + [f"after-{i}" for i in range(AFTER)])
    else:
        assert {a.detail.split("'")[1] for a in lost} == {f"lagging-{i}" for i in range(LAGGING)}, verdict.report()
        assert len(verdict.anomalies) == LAGGING, verdict.report()
