"""Every store implements the roles of ``crossdock.queue.jobstore`` as the Protocols spell them: the
same methods, parameters and defaults (what a caller typed with a role may pass). Behaviour is the
contract suite's (tests/contract/test_store_contract.py)."""

from __future__ import annotations

import inspect
import typing

import pytest

from crossdock.backends.memory_store import MemoryStore
from crossdock.backends.redis_store.store import JobStore
from crossdock.queue import jobstore

ROLES = [jobstore.JobReads, jobstore.SealedReads, jobstore.JobTransitions, jobstore.DispatchClaims,
         jobstore.StopRequests, jobstore.Heartbeats, jobstore.SchedulerLease, jobstore.JobResults,
         jobstore.JobOutput, jobstore.JobEvents, jobstore.RecordsStatuses, jobstore.BackendStore,
         jobstore.FollowerStore]
STORES = {"redis": (JobStore, ROLES),
          # it keeps no seals and does not record the follower's typed status passes (yet)
          "memory": (MemoryStore, [r for r in ROLES if r not in (jobstore.SealedReads, jobstore.RecordsStatuses,
                                                                 jobstore.FollowerStore)])}
CASES = [pytest.param(store, role, id=f"{name}-{role.__name__}") for name, (store, roles) in STORES.items()
         for role in roles]


def members(role: type) -> list[str]:
    return sorted(m for m in typing._get_protocol_attrs(role) if m != "services")  # noqa: SLF001


@pytest.mark.parametrize("store, role", CASES)
def test_the_store_has_each_method_of_the_role_with_its_parameters(store, role):
    for name in members(role):
        wanted = inspect.signature(getattr(role, name)).parameters
        got = inspect.signature(getattr(store, name)).parameters
        assert list(got) == list(wanted), f"{store.__name__}.{name}{inspect.signature(getattr(store, name))}"
        assert [p.default for p in got.values()] == [p.default for p in wanted.values()], name
        assert [p.kind for p in got.values()] == [p.kind for p in wanted.values()], name


def test_each_role_is_small():
    assert max(len(members(r)) for r in ROLES if r not in (jobstore.BackendStore, jobstore.FollowerStore)) <= 7


def test_the_ports_module_names_every_role():
    from crossdock.queue import ports

    assert all(getattr(ports, r.__name__) is r for r in ROLES)
