"""The fake backend: jobs kept in memory and driven by the test that uses it (``backend.py``)."""

from __future__ import annotations

from crossdock.queue.ports import Capabilities

CAPABILITIES = Capabilities(arrays=True, batches=True, reowns_claims=True, provisioners=("fake",), fleets=True,
                            evicts=True)
"""Arrays go out as one submission (with their throttle), submits are cheap, and a second submit
of one attempt answers with the object the first one made. No heartbeat, no queue of its own
beyond ``start_on_submit=False``, no logs. Evicts like ``preempt`` (budgets: ``budgets``). Fleets and provisioned pools live in memory (``elastic.py``)."""


def create(ctx):
    from crossdock.backends.fake.backend import FakeBackend

    return FakeBackend(ctx.config, ctx.store)
