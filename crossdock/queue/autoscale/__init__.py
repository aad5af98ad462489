"""Queue-length autoscaling, decided in the core and carried out by backends.

- :mod:`.hpa` — Kubernetes HPA's arithmetic (``recommend``, ``normalize``), equal to
  kube-controller-manager's for the same inputs.
- :mod:`.keda` — queue-length scaling on top of it, with KEDA's semantics (activation, cooldown,
  scale to and from zero); the backlog is what crossdock knows exactly.
- :mod:`.capacity` — how many nodes of a pool's template pending jobs need (placed with the real
  filters and scores on hypothetical nodes), and which pool to grow (least waste);
- :mod:`.scaledown` — which nodes to retire (unneeded for a while under a utilisation threshold,
  their work movable, never non-preemptible work) and which starting nodes to give up.
- :mod:`.plan` — one pass over every elastic queue and autoscaled pool: the decisions, each with
  the step that limited it, and the state the next pass needs.
- :mod:`.burst` — which backend a job goes to when its queue spans several, by expected start.

Everything here is pure: the autoscaler loop (``crossdock.workers.autoscaler``) reads the store
and the backends, calls :func:`.plan.plan`, and acts through ``ProvisionsNodes``/``ScalesFleet``.
"""
