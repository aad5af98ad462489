"""Python functions on the real Slurm cluster: the runner (``crossdock.workers.pyjob``) reads the
call from the store inside the Slurm job and stores the outcome there for ``result()``."""

from __future__ import annotations

import sys

import cloudpickle
import pytest
from test_slurm_array_dispatch import crossdock_on_slurm

from crossdock.client import Client
from crossdock.queue.states import JobState

pytestmark = [pytest.mark.slurm, pytest.mark.redis, pytest.mark.celery]
cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the job cannot import this test module


@pytest.fixture
def on_slurm(tmp_path, redis_url, monkeypatch):
    c = crossdock_on_slurm(tmp_path, redis_url, monkeypatch, backend_queue=1000)
    monkeypatch.chdir(tmp_path)
    yield c
    c.close()


def scale(x, b=1):
    return {"value": x * b, "host": __import__("socket").gethostname()}


class Refused(Exception):
    pass


def refuse(x):
    raise Refused(f"refused {x}")


def test_return_value_and_keywords_come_back_from_a_slurm_job(on_slurm, tmp_path):
    client = Client(on_slurm.rt).options(cpus=1, queue="batch")
    h = client.submit(scale, 7, b=5)
    out = h.result(timeout=120)
    assert out["value"] == 35
    job = h.job
    assert job.state is JobState.COMPLETED and job.backend_ref  # it ran on Slurm, not here
    assert not list(tmp_path.glob("slurm-*.out"))  # nothing dropped into the caller's directory


def test_a_remote_exception_is_reraised_with_its_traceback(on_slurm):
    h = Client(on_slurm.rt).submit(refuse, 3)
    with pytest.raises(Refused, match="refused 3") as exc:
        h.result(timeout=120)
    assert any("remote traceback" in n and "refuse" in n for n in exc.value.__notes__)
    assert h.state is JobState.FAILED


def test_an_unpicklable_return_value_is_a_clear_error(on_slurm):
    h = Client(on_slurm.rt).submit(lambda: __import__("threading").Lock())
    with pytest.raises(TypeError, match="cannot be pickled"):
        h.result(timeout=120)


def test_map_over_a_thousand_inputs(on_slurm):
    client = Client(on_slurm.rt)
    inputs = [f"{i:040d}" for i in range(1000)]  # 40 distinct characters each
    handles = client.map(lambda text: int(text) ** 2, inputs, chunksize=50)
    assert len(handles) == 1000 and len({h.id for h in handles}) == 20  # 20 Slurm array tasks of 50 inputs
    fields, size = client.runtime.store.call_parts_size(handles[0].job.spec.python.parts)
    assert fields == 21  # the function once, then one field per task
    assert size / 1000 < 150, size  # the sealed input (~60 B as base64) per input, nothing repeated
    assert [h.result(timeout=600) for h in handles] == [i * i for i in range(1000)]
    assert len({h.job.backend_ref.split("_")[0] for h in handles[::50]}) == 1  # one Slurm array
