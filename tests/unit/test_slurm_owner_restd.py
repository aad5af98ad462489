"""The plumbing of a request made by slurmrestd run as a job's owner (``owner_restd``), with a
stand-in slurmrestd: the request reaches it on stdin, it runs as the owner, its answer is parsed,
and one that never answers or is missing is an error naming why."""

from __future__ import annotations

import os
import pwd

import pytest

from crossdock.backends.slurm.driver import SlurmError, SlurmUnavailable
from crossdock.backends.slurm.owner_restd import OwnerRestd

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="runs the stand-in as another user: root only")

ANSWER = r"""#!/bin/sh
read -r request_line
request_line=$(printf %s "$request_line" | tr -d '\r')
body="{\"uid\": $(id -u), \"gid\": $(id -g), \"groups\": \"$(id -G)\", \"line\": \"$request_line\", \"conf\": \"$SLURM_CONF\"}"
printf 'HTTP/1.1 201 Created\r\nContent-Length: %s\r\n\r\n%s' "${#body}" "$body"
"""


@pytest.fixture
def tmp_path():
    """Under /tmp and 0755, not pytest's 0700 directory: the owner runs the stand-in from it."""
    import shutil
    import tempfile
    from pathlib import Path

    path = Path(tempfile.mkdtemp(prefix="crossdock-owner-restd-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def restd(tmp_path, script: str, timeout_s: float = 10.0) -> OwnerRestd:
    binary = tmp_path / "slurmrestd"
    binary.write_text(script)
    binary.chmod(0o755)
    tmp_path.chmod(0o755)
    conf = tmp_path / "slurm.conf"
    conf.write_text("ClusterName=test\n")
    owner = OwnerRestd({"SLURM_CONF": str(conf)}, "openapi/v0.0.38", timeout_s=timeout_s)
    owner.binary = str(binary)
    return owner


def test_the_request_is_made_as_the_owner(tmp_path):
    import json

    nobody = pwd.getpwnam("nobody")
    status, body = restd(tmp_path, ANSWER).request("nobody", "POST", "/slurm/v0.0.38/job/submit", b"{}", {})
    got = json.loads(body)
    assert status == 201
    assert (got["uid"], got["gid"], got["groups"]) == (nobody.pw_uid, nobody.pw_gid, str(nobody.pw_gid))
    assert got["line"].startswith("POST /slurm/v0.0.38/job/submit HTTP/1.1")
    assert got["conf"].startswith("/dev/fd/")


def test_one_that_exits_without_answering_is_unavailable(tmp_path):
    with pytest.raises(SlurmUnavailable, match="exited without an answer: nope"):
        restd(tmp_path, "#!/bin/sh\necho nope >&2\n").request("nobody", "GET", "/x", None, {})


def test_one_that_never_answers_is_stopped(tmp_path):
    with pytest.raises(SlurmUnavailable, match="did not answer within 1s"):
        restd(tmp_path, "#!/bin/sh\nexec sleep 30\n", timeout_s=1).request("nobody", "GET", "/x", None, {})


def test_no_slurmrestd_is_a_clear_error(tmp_path):
    owner = restd(tmp_path, "")
    owner.binary = None
    with pytest.raises(SlurmError, match="slurmrestd not found"):
        owner.request("nobody", "GET", "/x", None, {})
