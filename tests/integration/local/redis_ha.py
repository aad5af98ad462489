"""A Redis master, a replica and three sentinels (Debian's ``redis-sentinel``) on 127.0.0.1, each on
its own free port, for the failover tests; every process is stopped at the end."""

from __future__ import annotations

import shutil
import signal
import subprocess
from pathlib import Path

import pytest
import redis

from crossdock.dev.proc import free_port
from tests.conftest import in_ci
from tests.waiting import eventually

MASTER_NAME = "crossdock"


class RedisHA:
    def __init__(self, root: Path):
        self.root = root
        self.procs: dict[str, subprocess.Popen] = {}
        self.argv: dict[str, list[str]] = {}
        self.ports = {"master": free_port(), "replica": free_port()}
        self.sentinel_ports = [free_port() for _ in range(3)]

    def _start(self, name: str, argv: list[str]) -> None:
        self.argv[name] = argv
        log = open(self.root / f"{name}.log", "ab")
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=self.root)
        log.close()

    def start(self) -> "RedisHA":
        server = shutil.which("redis-server")
        sentinel = shutil.which("redis-sentinel")
        if server is None or sentinel is None:
            why = "redis-server and redis-sentinel (Debian's redis-sentinel; scripts/setup.sh installs it)"
            if in_ci():
                pytest.fail(f"missing {why}", pytrace=False)
            pytest.skip(f"missing {why}")
        common = ["--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--protected-mode", "no"]
        self._start("master", [server, "--port", str(self.ports["master"]), *common])
        self._start("replica", [server, "--port", str(self.ports["replica"]), *common,
                                "--replicaof", "127.0.0.1", str(self.ports["master"])])
        for i, port in enumerate(self.sentinel_ports):
            conf = self.root / f"sentinel-{i}.conf"  # a sentinel rewrites its own file
            conf.write_text(f"port {port}\nbind 127.0.0.1\nprotected-mode no\ndir {self.root}\n"
                            f"sentinel monitor {MASTER_NAME} 127.0.0.1 {self.ports['master']} 2\n"
                            f"sentinel down-after-milliseconds {MASTER_NAME} 1000\n"
                            f"sentinel failover-timeout {MASTER_NAME} 10000\n"
                            f"sentinel parallel-syncs {MASTER_NAME} 1\n")
            self._start(f"sentinel-{i}", [sentinel, str(conf)])
        replica = self.client("replica")
        eventually("the replica to sync", lambda: self._up(replica) and
                   replica.info("replication").get("master_link_status") == "up")
        for port in self.sentinel_ports:  # every sentinel knows the replica and the other sentinels
            s = redis.Redis(port=port, decode_responses=True)
            eventually(f"sentinel {port} to see the replica and its peers", lambda: self._up(s) and
                       int(s.sentinel_master(MASTER_NAME).get("num-slaves", 0)) == 1 and
                       int(s.sentinel_master(MASTER_NAME).get("num-other-sentinels", 0)) == 2)
        return self

    @staticmethod
    def _up(client: redis.Redis) -> bool:
        try:
            return bool(client.ping())
        except redis.RedisError:
            return False

    def client(self, name: str) -> redis.Redis:
        return redis.Redis(port=self.ports[name], decode_responses=True)

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return f"redis+sentinel://{hosts}/{MASTER_NAME}/0"

    def master_port(self) -> int:
        s = redis.Redis(port=self.sentinel_ports[0], decode_responses=True)
        return int(s.sentinel_get_master_addr_by_name(MASTER_NAME)[1])

    def kill_master(self) -> None:
        """SIGKILL the master once the replica has every write it acknowledged: writes are paused
        first (Redis replicates asynchronously; losing the last milliseconds of writes in a crash
        is Redis' documented limit, not what this measures)."""
        master, replica = self.client("master"), self.client("replica")
        master.execute_command("CLIENT", "PAUSE", "5000", "WRITE")
        offset = master.info("replication")["master_repl_offset"]
        eventually("the replica to catch up", lambda: replica.info("replication")["slave_repl_offset"] >= offset, 5)
        self.procs["master"].send_signal(signal.SIGKILL)
        self.procs["master"].wait()

    def restart(self, name: str, extra: list[str] | None = None) -> None:
        """Start ``name`` again as it was first started (plus ``extra`` arguments), once it is gone."""
        self.procs[name].wait()
        self._start(name, [*self.argv[name], *(extra or [])])

    def sentinels_agree(self, port: int) -> bool:
        """Every sentinel names the server on ``port`` as the master."""
        try:
            return all(int(redis.Redis(port=p, decode_responses=True).sentinel_get_master_addr_by_name(MASTER_NAME)[1])
                       == port for p in self.sentinel_ports)
        except redis.RedisError:
            return False

    def replicas_of_master(self) -> int:
        s = redis.Redis(port=self.sentinel_ports[0], decode_responses=True)
        try:
            return sum(1 for r in s.sentinel_slaves(MASTER_NAME) if "s_down" not in r.get("flags", "")
                       and r.get("master-link-status") == "ok")
        except redis.RedisError:
            return 0

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)  # one a test stopped takes its SIGTERM
                proc.terminate()
        for proc in self.procs.values():
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def ha(tmp_path):
    """A master, a replica and three sentinels, running; stopped at the end."""
    root = tmp_path / "redis-ha"
    root.mkdir()
    cluster = RedisHA(root)
    try:
        yield cluster.start()
    finally:
        cluster.stop()
