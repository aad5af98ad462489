"""Fixtures for tests against a real Kubernetes control plane.

With ``KUBECONFIG`` set, the tests use that cluster. Otherwise the session
shares the local control plane of ``crossdock.dev.k8s`` (binaries built with
``python -m crossdock.dev.k8s build``) through ``k8s.session()``: started when
needed, stopped by the last session using it unless a developer started it with
``python -m crossdock.dev.k8s up`` or ``CROSSDOCK_K8S_KEEP=1``. When the plane is unreachable the
tests skip locally and FAIL under ``CI=true``.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from crossdock.dev import k8s
from tests.conftest import k8s_unavailable

kubernetes = pytest.importorskip("kubernetes")
from kubernetes import client  # noqa: E402
from kubernetes.client.rest import ApiException  # noqa: E402
from k8s_helpers import wait_for as _wait_for



@pytest.fixture(scope="session")
def k8s_binaries() -> Path:
    """The directory of the locally built binaries, for tests that start their own plane.

    Missing binaries skip such tests, and fail them under ``CI=true`` unless
    ``KUBECONFIG`` names the cluster that CI provides instead.
    """
    missing = k8s._missing_binaries()
    if missing:
        reason = f"missing {', '.join(missing)} in {k8s.bin_dir()} (python -m crossdock.dev.k8s build)"
        if os.environ.get("KUBECONFIG"):
            pytest.skip(reason)
        k8s_unavailable(reason)
    return k8s.bin_dir()




@pytest.fixture
def k8s_namespace(k8s_client: client.ApiClient) -> Iterator[str]:
    """A fresh namespace whose ``default`` service account exists; its pods are gone after the test."""
    core = client.CoreV1Api(k8s_client)
    name = f"cd-test-{uuid.uuid4().hex[:8]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))

    def service_account() -> Any:
        try:
            return core.read_namespaced_service_account("default", name)
        except ApiException as err:
            if err.status == 404:
                return None
            raise

    _wait_for(f"service account {name}/default", service_account)
    yield name
    # Free the fake nodes' capacity before the next test: delete the Jobs and their
    # pods now and wait until kwok has removed every pod, then drop the namespace.
    batch = client.BatchV1Api(k8s_client)
    batch.delete_collection_namespaced_job(name, propagation_policy="Background")
    core.delete_collection_namespaced_pod(name, grace_period_seconds=0)
    _wait_for(f"pods of {name} deleted", lambda: not core.list_namespaced_pod(name).items, timeout=60)
    core.delete_namespace(name)
