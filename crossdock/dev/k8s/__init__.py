"""A real, local Kubernetes control plane (see ``controlplane``)."""

from crossdock.dev.k8s.controlplane import *  # noqa: F401,F403
from crossdock.dev.k8s.controlplane import GPU_RESOURCE, LABEL_POOL, _missing_binaries  # noqa: F401
