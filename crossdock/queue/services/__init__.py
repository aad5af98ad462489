"""Inference services: long-running replicated servers beside the batch jobs.

The types live in :mod:`crossdock.queue.serving` (a leaf the config and the ports can name) and
are re-exported here; :mod:`.controller` decides, pass by pass, what happens to a service's
replicas; :mod:`.replicas` turns a service into its replica jobs' specs.
"""

from crossdock.queue.serving import (SERVICE_NAME, Endpoint, IllegalServiceTransition, ServiceMetrics, ServiceRecord,
                                     ServiceReplica, ServiceSpec, ServiceState, ServiceStatus, service_transition)

__all__ = ["Endpoint", "IllegalServiceTransition", "ServiceMetrics", "ServiceRecord", "ServiceReplica", "ServiceSpec",
           "ServiceState", "ServiceStatus", "SERVICE_NAME", "service_transition"]
