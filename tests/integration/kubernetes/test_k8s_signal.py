"""sbatch's ``--signal`` on the real control plane: the pod's command, run as the container would
run it (kwok runs none), gets the signal ``sig_time`` seconds before the time limit, to every
process of the container or (``B:``) to the job's command alone."""

from __future__ import annotations

import pytest
from test_k8s_array_dispatch import crossdock_on_k8s  # noqa: F401 - the fixture
from test_k8s_python import created_job, run_container

from crossdock import service
from crossdock.backends.kubernetes import manifests as m
from crossdock.queue.models import JobSpec
from crossdock.queue.sbatch_extras import parse_signal

pytestmark = [pytest.mark.kubernetes, pytest.mark.redis, pytest.mark.celery]

# ends itself when USR1 arrives; the limit is 60 s and USR1 comes 58 s before it. Its child, a
# shell always alive (ending when its parent has), says when it gets USR1 too: it does without B:
# whenever the signal comes (a short sleep may or may not be running at that moment)
SCRIPT = ("(trap 'echo child got USR1 >&2; exit 0' USR1; for i in $(seq 300); do kill -0 $$ 2>/dev/null || exit 0; "
          "sleep 0.1 & wait $!; done) & trap 'echo got USR1; exit 0' USR1; wait; echo no signal; exit 3")


@pytest.mark.parametrize("flags", ["", "B:"], ids=["every-process", "batch-shell"])
def test_signal_is_delivered_before_the_time_limit(crossdock_on_k8s, k8s_client, k8s_namespace, flags):  # noqa: F811
    job, = service.submit(crossdock_on_k8s.rt, [JobSpec(
        command=["bash", "-c", SCRIPT], time_limit_seconds=60, kill_signal=parse_signal(f"{flags}USR1@58"),
        env={"CROSSDOCK_SIMULATE_RUN_SECONDS": "30"})])
    kjob = created_job(k8s_client, k8s_namespace, m.LABEL_JOB_ID, job.id)
    assert kjob.spec.template.spec.active_deadline_seconds == 60
    proc = run_container(kjob)
    assert (proc.returncode, proc.stdout) == (0, "got USR1\n"), proc.stderr
    # without B: every process of the container gets it, the child shell as well
    assert ("child got USR1" in proc.stderr) is (flags == ""), proc.stderr
