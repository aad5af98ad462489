"""The descheduler's pure policy: which running jobs to move, where, and why.

``budgets`` (disruption budgets), ``migration`` (the records a plan returns), ``defrag``
(blocked GPU jobs → the fewest migrations, destinations reserved first), ``strategies`` (the
upstream descheduler's plugins, with its parameter names), ``evictor`` (its DefaultEvictor
rules and caps) and ``plan`` (all of it in one dry-runnable step). Nothing here performs a move:
the leader's descheduler step (``crossdock.workers.descheduler``) acts through ``EvictsJobs``.
"""
