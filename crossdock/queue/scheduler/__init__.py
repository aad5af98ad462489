"""crossdock's scheduler: one filter/score framework for Slurm partitions and Kubernetes node pools.

``crossdock.queue.cycle.run_cycle`` is the entry point; these modules are its parts:

- ``request``      a pending job reduced to per-node amounts and constraints (``build_request``)
- ``inventory``    the cycle's numpy picture of the nodes and every GPU device, MIG slice and share
- ``gpus``         which devices one worker gets (NVLink island best fit, share best fit, MIG slices)
- ``framework``    the Protocols per extension point, ``Status``/``Code``, ``CycleState``
- ``registry``     plugins by name (each plugin module registers itself), the plugin names per
                   extension point, ``Profile``, kube-scheduler's "0/N nodes are available: …"
                   text (``explain``); it imports no plugin
- ``profiles``     the profile a queue's ``placement``/``plugin_weights`` select (``profile_for``);
                   importing it imports ``plugins`` and so registers every plugin
- ``plugins/``     one module per plugin: filters (NodeUnschedulable, PoolMembership, NodeList,
                   NodeSelector, TaintToleration, GpuModel, GpuSharing, MigProfile, NodeResourcesFit,
                   GpuTopology, AntiAffinity, ReservedCapacity) and scores (MostAllocated,
                   LeastAllocated, RequestedToCapacityRatio, BalancedAllocation, GpuFragmentation)
- ``scoring``      kube-scheduler's resource scores as pure integer functions (``node_score``)
- ``placement``    filter → score → pick → assign for one job, gangs all-or-nothing, topology domains
- ``fairshare``    decayed usage, dominant shares and the order jobs are tried in
- ``quota``        nominal quotas per queue and GPU model, cohort borrowing, per-user caps
- ``preemption``   the fewest strictly-lower-priority preemptible victims (post-filter)
- ``backfill``     the blocked job's reservation from the running jobs' time limits
- ``pipeline``     the per-job steps of the cycle and its per-phase timings
- ``decisions``    ``Placement``, ``Preemption``, ``Reservation``, ``CycleResult``

Outside a cycle (tests, offline tools): build an ``Inventory(nodes)``, ``inventory.load(allocations)``, a
``CycleState(inventory, config, now)``, take ``profiles.profile_for(placement)`` and call
``profile.feasible(state, request)`` / ``placement.place(state, profile, request)``;
``scoring.node_score`` and ``plugins.gpu_frag`` are pure functions of plain numbers (the offline
simulator, ``crossdock.sim``, scores with them; nothing here imports it).
"""
