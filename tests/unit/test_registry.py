"""Backend kinds, their capabilities and their typed settings."""

from __future__ import annotations

import importlib

import pytest

from crossdock.backends import registry
from crossdock.queue.ports import BackendUnavailable, Capabilities


@pytest.mark.parametrize("kind", registry.kinds())
def test_every_kind_declares_capabilities_and_a_factory(kind):
    package = importlib.import_module(registry.BACKENDS[kind])
    assert isinstance(registry.capabilities(kind), Capabilities)
    assert callable(package.create)


def test_an_unknown_kind_is_refused_with_the_known_ones():
    with pytest.raises(BackendUnavailable, match="unknown backend 'pbs'; known: local, slurm, k8s") as err:
        registry.capabilities("pbs")
    assert not err.value.retryable


def test_an_injected_backend_answers_for_its_own_capabilities():
    class Stub:
        kind = "slurm"
        capabilities = Capabilities(heartbeat=True)

    backends = registry.Backends(registry.BackendContext(config=None, store=None, state_dir=None))  # type: ignore[arg-type]
    assert not backends.capabilities("slurm").heartbeat
    backends.use("slurm", Stub())  # type: ignore[arg-type]
    assert backends.capabilities("slurm").heartbeat and isinstance(backends("slurm"), Stub)


def test_bad_backend_settings_name_every_variable_value_and_fix():
    from crossdock.backends.kubernetes import KubernetesSettings
    from crossdock.backends.slurm import SlurmSettings

    with pytest.raises(BackendUnavailable) as err:
        SlurmSettings.from_env({"CROSSDOCK_SLURM_DRIVER": "pyslurm", "CROSSDOCK_SLURM_PREEMPT": "kill"})
    assert "CROSSDOCK_SLURM_DRIVER='pyslurm'" in str(err.value) and "CROSSDOCK_SLURM_PREEMPT='kill'" in str(err.value)
    assert "'cli', 'rest' or 'rest-unix'" in str(err.value)
    with pytest.raises(BackendUnavailable, match="CROSSDOCK_K8S_TTL_SECONDS='-1'"):
        KubernetesSettings.from_env({"CROSSDOCK_K8S_TTL_SECONDS": "-1"})
    got = KubernetesSettings.from_env({"KUBECONFIG": "/k", "CROSSDOCK_K8S_SYNC_PRIORITY_CLASSES": "0"})
    assert (got.kubeconfig, got.sync_priority_classes, got.namespace) == ("/k", False, "default")
