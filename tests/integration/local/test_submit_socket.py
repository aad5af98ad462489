"""``crossdock submit`` through a multi-user service: the client hands its argv to the service and
imports nothing but the standard library; the service reads no file for it."""

from __future__ import annotations

import os
import subprocess

import pytest

from tests.integration.local.test_users import SECOND
from tests.integration.local.test_users_socket import as_second, cli_as_second, root_client, service  # noqa: F401

pytestmark = [pytest.mark.redis, pytest.mark.celery]


def test_a_submission_through_the_socket_is_the_callers(service):  # noqa: F811
    script = service["work"] / "job.sh"
    script.write_text("#!/bin/sh\n#SBATCH -J from-script -t 5 --hold\necho \"$GREETING\" \"$@\"\n")
    os.chown(script, service["uid"], service["gid"])
    r = as_second(service, ["-m", "crossdock.cli.main", "submit", "--parsable", "--export=GREETING", "-c", "2",
                            "job.sh", "arg"], extra={"GREETING": "hello", "CROSSDOCK_SECRET_THING": "x"})
    assert r.returncode == 0, r.stderr
    job = root_client().gateway.job(int(r.stdout))
    assert job.spec.user == SECOND and job.spec.name == "from-script" and job.spec.cpus_per_task == 2
    assert job.spec.script == script.read_text() and job.spec.args == ["arg"] and job.spec.hold
    assert job.spec.workdir == str(service["work"])  # the client's directory, not the service's
    assert job.spec.env["GREETING"] == "hello" and not any(k.startswith("CROSSDOCK_") for k in job.spec.env)
    # a script piped in: the service asks the client for its standard input
    piped = subprocess.run([service["python"], "-m", "crossdock.cli.main", "submit", "--parsable", "-H"],
                           input="#!/bin/sh\necho piped\n", user=service["uid"], group=service["gid"],
                           extra_groups=[], env=service["env"], cwd=service["work"], capture_output=True,
                           text=True, timeout=120)
    assert piped.returncode == 0, piped.stderr
    assert root_client().gateway.job(int(piped.stdout)).spec.script == "#!/bin/sh\necho piped\n"


def test_the_service_never_reads_a_file_for_its_caller(service):  # noqa: F811
    secret = service["home"] / "root-only.sh"
    secret.write_text("#!/bin/sh\necho root's secret\n")
    secret.chmod(0o600)
    r = cli_as_second(service, "submit", str(secret))
    assert r.returncode == 2 and r.stderr.strip() == \
        f"crossdock: error: SCRIPT: cannot read {str(secret)!r}: Permission denied", r.stderr
    bad = cli_as_second(service, "submit", "-t", "soon", "-c", "0", "--wrap", "true")
    lines = bad.stderr.strip().splitlines()
    assert bad.returncode == 2 and len(lines) == 2 and "-t: invalid value 'soon'" in lines[0], bad.stderr
    assert "Traceback" not in r.stderr + bad.stderr


def test_the_client_loads_neither_pydantic_nor_redis(service):  # noqa: F811
    code = ("import sys\nsys.argv = ['crossdock', 'submit', '--parsable', '-H', '--wrap', 'true']\n"
            "from crossdock.cli.thin import served\n"
            "code = served('submit', sys.argv[2:])\n"
            "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('pydantic', 'redis', 'yaml', 'celery')"
            " or m.startswith('crossdock.queue'))\n"
            "print(code, heavy, file=sys.stderr)\n")
    r = as_second(service, ["-c", code])
    assert r.returncode == 0 and r.stdout.strip().isdigit(), r
    assert r.stderr.strip().splitlines()[-1] == "0 []", r.stderr
