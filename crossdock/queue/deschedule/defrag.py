"""Defragmentation: the fewest moves that let a pending GPU job blocked by scattered free GPUs start.

A pending job is *blocked by fragmentation* when it passes its pre-filters (quota, limits), fits no
node now, and the nodes it may use hold at least as many idle GPUs as it needs, just not on one
node (or one NVLink island). For such a job, in priority order, the search looks for the smallest
set of running jobs on one node whose departure lets it fit there, where every one of them has a
destination elsewhere (never its own node, never the target): sizes 1, 2, … over every usable
node before the next size, so the number of moves is minimal for this move model (each moved job
lands on capacity free now; chains of moves are not tried). Destinations are chosen with the
moved job's own filters and scores, exactly (backtracking over the nodes, best first), and kept
reserved in the view so that a later blocked job in the same plan does not count on them; the
leader nominates them so the moved job lands there and the target node is held for the blocked job.

Only movable jobs (:class:`~crossdock.queue.deschedule.evictor.Evictor`) of strictly lower
priority than the blocked job move; gangs (jobs on several nodes) neither move nor are unblocked.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import combinations

from crossdock.queue.cycle import eligibility
from crossdock.queue.deschedule.evictor import Evictor
from crossdock.queue.deschedule.migration import Migration, Skipped
from crossdock.queue.deschedule.view import Candidate, View, away_from
from crossdock.queue.models import Job
from crossdock.queue.scheduler.inventory import Assignment
from crossdock.queue.scheduler.placement import feasible
from crossdock.queue.scheduler.request import Request

NAME = "Defragmentation"
LANDING_TRIES = 5000
"""Destinations tried per candidate set when landing its jobs (backtracking)."""


@dataclass
class Found:
    node: int
    """The node freed for the blocked job."""
    moves: list[tuple[Candidate, int]]
    """Each moved job with its destination node."""


def blocked_by_fragmentation(view: View, job: Job, req: Request) -> str | None:
    """None when ``job`` is blocked by fragmentation only; else why not (for the dry run)."""
    if not req.gpus or req.gpu_share_milli or req.mig_count:
        return "asks for no whole GPUs"
    if req.nodes != 1:
        return "a gang of several nodes (not defragmented)"
    if job.id in view.snapshot.nominations:
        return "capacity is already being freed for it (nominated)"
    if eligibility(job, view.snapshot, view.now, dict(view.snapshot.running_per_array)) is not None:
        return "not eligible to start (held, dependency, begin time or array limit)"
    profile = view.profile(req)
    for plugin in profile.pre_filters:
        status = plugin.pre_filter(view.state, req)
        if not status.ok:
            return f"not startable: {status.message or status.reason}"
    if len(feasible(view.state, profile, req)):
        return "fits now"
    static = profile.static_nodes(view.state, req)
    idle = int(view.inv.gpu_free[static].sum())
    if idle < req.gpus:
        return f"only {idle} idle GPU(s) on its nodes, it needs {req.gpus}"
    return None


def defragment(view: View, evictor: Evictor, skipped: list[Skipped]) -> tuple[list[Migration], list[int]]:
    cfg = view.config.descheduler.defrag
    migrations: list[Migration] = []
    unblocked: list[int] = []
    for job, req in sorted(view.pending_requests, key=lambda jr: (-jr[0].priority, jr[0].spec.nice, jr[0].id)):
        if blocked_by_fragmentation(view, job, req) is not None:
            continue
        idle = int(view.inv.gpu_free[view.profile(req).static_nodes(view.state, req)].sum())
        found = _search(view, evictor, job, req, cfg.max_migrations_per_blocked_job, cfg.search_limit, skipped)
        if found is None:
            continue
        target = view.name(found.node)
        for c, dest in found.moves:
            evictor.take(c)
            migrations.append(Migration(
                c.id, c.job.attempts, tuple(a.node for a in c.allocations), (view.name(dest),), NAME,
                f"makes room for job {job.id} ({req.gpus} GPU(s), priority {job.priority}) on {target}:"
                f" {idle} GPUs idle on its nodes but scattered", for_job=job.id, gpus=c.gpus))
        unblocked.append(job.id)
    return migrations, unblocked


def _search(view: View, evictor: Evictor, job: Job, req: Request, cap: int, limit: int,
            skipped: list[Skipped]) -> Found | None:
    inv = view.inv
    static = view.profile(req).static_nodes(view.state, req).tolist()
    movable: dict[int, list[Candidate]] = {}
    bound: dict[int, int] = {}
    noted: set[int] = set()
    for i in static:
        usable = []
        for c in view.on_node.get(i, []):
            why = "runs on several nodes (a gang)" if len(c.nodes) > 1 else evictor.why_not(c, below=job.priority)
            if why is None:
                usable.append(c)
            elif c.id not in noted:
                noted.add(c.id)
                skipped.append(Skipped(c.id, NAME, f"{why} (for job {job.id})"))
        if not usable:
            continue
        usable.sort(key=lambda c: (c.job.priority, c.gpus, -(c.job.start_time.timestamp() if c.job.start_time else 0), c.id))
        need = (req.gpus - int(inv.gpu_free[i]), req.cpu_milli - int(inv.cpu_free[i]), req.memory_mib - int(inv.mem_free[i]))
        k = _least(need, usable)
        if k is not None and k <= cap:
            movable[i], bound[i] = usable, k
    for k in range(1, cap + 1):
        for i in sorted((i for i in movable if bound[i] <= k), key=lambda i: (bound[i], i)):
            need = (req.gpus - int(inv.gpu_free[i]), req.cpu_milli - int(inv.cpu_free[i]),
                    req.memory_mib - int(inv.mem_free[i]))
            tried = 0
            for combo in combinations(movable[i], k):
                if not _covers(need, combo):
                    continue
                tried += 1
                if tried > limit:
                    break
                if evictor.allows_together(list(combo)) is not None:
                    continue
                moves = _try(view, req, i, list(combo))
                if moves is not None:
                    return Found(i, moves)
    return None


def _amounts(c: Candidate) -> tuple[int, int, int]:
    return (c.gpus, sum(a.cpu_milli for a in c.allocations), sum(a.memory_mib for a in c.allocations))


def _least(need: tuple[int, int, int], usable: list[Candidate]) -> int | None:
    """A lower bound on how many of ``usable`` must go to cover ``need`` (None: all are not enough)."""
    k = 0
    for r in range(3):
        if need[r] <= 0:
            continue
        amounts = sorted((_amounts(c)[r] for c in usable), reverse=True)
        total, n = 0, 0
        for a in amounts:
            if total >= need[r]:
                break
            total, n = total + a, n + 1
        if total < need[r]:
            return None
        k = max(k, n)
    return max(k, 1)


def _covers(need: tuple[int, int, int], combo: tuple[Candidate, ...]) -> bool:
    got = [0, 0, 0]
    for c in combo:
        for r, a in enumerate(_amounts(c)):
            got[r] += a
    return all(g >= n for g, n in zip(got, need))


def _try(view: View, req: Request, i: int, combo: list[Candidate]) -> list[tuple[Candidate, int]] | None:
    """Move ``combo`` off node ``i``, put the blocked job there, land every moved job elsewhere;
    on success the view keeps it all (the reservations), else it is as before."""
    for c in combo:
        view.release(c)
    placed: Assignment | None = view.assign(req, i) if view.fits_on(req, i) else None
    if placed is not None:
        order = sorted(combo, key=lambda c: (-c.gpus, c.id))  # the hardest to land first
        landed: list[tuple[Candidate, Assignment]] = []
        if _land(view, order, 0, {i}, landed, [LANDING_TRIES]):
            return [(c, a.node) for c, a in landed]
        view.inv.undo(placed)
    for c in reversed(combo):
        view.restore(c)
    return None


def _land(view: View, order: list[Candidate], k: int, avoid: set[int], landed: list[tuple[Candidate, Assignment]],
          tries: list[int]) -> bool:
    if k == len(order):
        return True
    c = order[k]
    req = away_from(c, avoid, view)
    for d in view.destinations(c, avoid):
        tries[0] -= 1
        if tries[0] < 0:
            return False
        a = view.assign(req, d)
        if a is None:
            continue
        landed.append((c, a))
        if _land(view, order, k + 1, avoid, landed, tries):
            return True
        landed.pop()
        view.inv.undo(a)
    return False
