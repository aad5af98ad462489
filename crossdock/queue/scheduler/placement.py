"""Choosing nodes and devices for one job: filter, score, pick, assign — all workers or none.

- GPU jobs score every feasible node: on the Alibaba trace, sampling 41 % of the nodes cost the
  fragmentation-aware score 1.35 points of GPU allocation (docs/simulation.md).
- Like kube-scheduler, any other single-worker job scores only a sample of the feasible nodes on big
  clusters (``percentageOfNodesToScore``'s adaptive default: ``max(5, 50 - n/125)`` percent,
  at least 100 nodes), taken round-robin from where the previous job's sample ended; ties go
  to the lower node index (nodes are sorted by name), so a cycle is deterministic.
- A gang (``nodes > 1``) gets its N best-scoring feasible nodes, one worker per node; with a
  ``topology_key`` all N come from one label value (the domain with the best N scores).
- If any worker cannot get its devices, every worker already assigned is rolled back.

Jobs of one cycle share few shapes, and each placement changes one node, so per request shape the
cycle keeps the node-local filters' verdicts (:func:`feasible`) and the scores (:func:`score_distinct`)
for every node, and re-derives them only for the nodes listed in ``Inventory.changes`` since the
shape was last placed. The nodes and scores are those a fresh filter and score pass gives.
"""

from __future__ import annotations

import numpy as np

from crossdock.queue.scheduler import gpus
from crossdock.queue.scheduler.framework import CycleState
from crossdock.queue.scheduler.inventory import FULL, Assignment, Inventory
from crossdock.queue.scheduler.plugins import service_spread
from crossdock.queue.scheduler.registry import Profile, passing
from crossdock.queue.scheduler.request import Request

MIN_NODES_TO_SCORE = 100
FEW_STATES = 16


def nodes_to_score(total: int) -> int:
    if total < MIN_NODES_TO_SCORE:
        return total
    pct = max(5, 50 - total // 125)
    return max(MIN_NODES_TO_SCORE, total * pct // 100)


def candidates(state: CycleState, profile: Profile, req: Request) -> np.ndarray:
    """The nodes one job is scored on: every feasible node for a gang; for a single worker the
    first ``nodes_to_score`` feasible nodes from where the last search stopped. Like kube, the
    dynamic filters run only until enough feasible nodes are found: first over a window of twice
    that many nodes, over all of them only if the window falls short (same nodes either way)."""
    static = profile.static_nodes(state, req)
    want = nodes_to_score(state.inventory.n)
    if req.nodes > 1 or _wants_gpu(req):
        return feasible(state, profile, req)
    if len(static) <= 2 * want:
        return sample(state, feasible(state, profile, req))
    pos = int(np.searchsorted(static, state.extra.get("next_start", 0)))
    end = pos + 2 * want
    window = static[pos:end] if end <= len(static) else np.concatenate([static[pos:], static[:end - len(static)]])
    found = feasible(state, profile, req, window)
    if len(found) >= want:
        picked = found[:want]
        state.extra["next_start"] = (int(picked[-1]) + 1) % state.inventory.n
        return picked
    return sample(state, feasible(state, profile, req))


def feasible(state: CycleState, profile: Profile, req: Request, idx: np.ndarray | None = None) -> np.ndarray:
    """``profile.feasible(state, req, idx)`` (default: the static nodes), with the verdicts of the
    node-local filters kept per request shape and re-derived only for the nodes that changed.

    A filter with ``local = True`` decides a node from the request's shape and that node's own
    inventory row alone, and every change to a row goes through ``Inventory.refresh`` (logged in
    ``Inventory.changes``), so a verdict stays right until its node is listed again. The other
    dynamic filters (holds for nominated and reserved capacity) run on the result as before;
    filters are per-node predicates, so the nodes and their order are those of ``profile.feasible``.
    """
    return _feasible(state, profile, req, idx)[0]


def _feasible(state: CycleState, profile: Profile, req: Request,
              idx: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """:func:`feasible`, and with ``idx`` None the boolean mask over every node the result equals
    (None when another filter removed nodes from it)."""
    verdicts = _local_verdicts(state, profile, req)
    ok = verdicts.ok
    out, whole = (np.flatnonzero(ok), ok) if idx is None else (idx[ok[idx]], None)
    for f in verdicts.others:
        if len(out) == 0:
            break
        mask = f.filter(state, req, out)
        if mask is not None:
            out, whole = out[mask], None
    return out, whole


class _Verdicts:
    """One request shape's node-local filter verdicts: ``ok[i]`` for every node, synced up to
    ``Inventory.changes[:seen]``; ``allowed`` marks the nodes that pass the static filters."""

    __slots__ = ("ok", "seen", "allowed", "local", "others")

    def __init__(self, ok: np.ndarray, seen: int, allowed: np.ndarray, local: list, others: list):
        self.ok, self.seen, self.allowed, self.local, self.others = ok, seen, allowed, local, others


def _local_verdicts(state: CycleState, profile: Profile, req: Request) -> _Verdicts:
    inv = state.inventory
    key = ("local", id(profile), req.shape_key())
    hit = state.cache.get(key)
    if hit is None:
        static = profile.static_nodes(state, req)
        local = [f for f in profile.dynamic_filters if getattr(f, "local", False)]
        others = [f for f in profile.dynamic_filters if not getattr(f, "local", False)]
        allowed = np.zeros(inv.n, bool)
        allowed[static] = True
        ok = np.zeros(inv.n, bool)
        ok[passing(local, state, req, static)] = True
        hit = state.cache[key] = _Verdicts(ok, len(inv.changes), allowed, local, others)
    elif hit.seen < len(inv.changes):
        changed = inv.changes[hit.seen:]
        hit.seen = len(inv.changes)
        if 4 * len(changed) > inv.n:
            rows = profile.static_nodes(state, req)
        else:  # filters expect distinct nodes
            rows = np.array(sorted(set(changed)), np.int64)
            rows = rows[hit.allowed[rows]]
        if len(rows):
            hit.ok[rows] = False
            hit.ok[passing(hit.local, state, req, rows)] = True
    return hit


def _wants_gpu(req: Request) -> bool:
    return bool(req.gpus or req.gpu_share_milli or req.mig_count)


def sample(state: CycleState, feasible: np.ndarray) -> np.ndarray:
    want = nodes_to_score(state.inventory.n)
    if len(feasible) <= want:
        return feasible
    start = state.extra.get("next_start", 0)
    pos = int(np.searchsorted(feasible, start))
    end = pos + want
    picked = feasible[pos:end] if end <= len(feasible) else np.concatenate([feasible[pos:], feasible[:end - len(feasible)]])
    state.extra["next_start"] = (int(picked[-1]) + 1) % state.inventory.n
    return picked


def assign_worker(inv: Inventory, req: Request, i: int) -> Assignment | None:
    devices: list[tuple[int, int]] = []
    slices: list[tuple[str, str]] = []
    cpu, mem = req.cpu_milli, req.memory_mib
    if req.exclusive:
        cpu, mem = int(inv.cpu_free[i]), int(inv.mem_free[i])
        idle = np.flatnonzero(inv.dev_exists[i] & (inv.dev_free[i] == FULL))
        devices = [(int(c), FULL) for c in idle]
        if len(idle) < req.gpus:
            return None
    elif req.gpus:
        free = inv.dev_free[i, :inv.gpu_total[i]].tolist()  # a node's devices fill its row's first columns
        cols = gpus.whole_of(free, inv.dev_island_of[i], req.gpus, int(inv.island_cap[i]))
        if cols is None:
            return None
        devices = [(c, FULL) for c in cols]
    if req.gpu_share_milli:
        col = gpus.share_of(inv.dev_free[i, :inv.gpu_total[i]].tolist(), req.gpu_share_milli)
        if col is None:
            return None
        devices = [(col, req.gpu_share_milli)]
    if req.mig_count:
        picked = gpus.choose_slices(inv.slice_free[i], req.mig or "", req.mig_count)
        if picked is None:
            return None
        slices = [(req.mig or "", s) for s in picked]
    return inv.take(i, cpu, mem, devices, slices, req.group if req.anti_affinity else None, req.service)


def score_distinct(state: CycleState, profile: Profile, req: Request, cand: np.ndarray) -> np.ndarray:
    """Scores of ``cand``, computed once per distinct node state (``Inventory.sig``) and request shape.

    A score depends only on the node's state and the request (and the cycle's fixed typical pods),
    so nodes in the same state score the same, and a state scored for an earlier job of the same
    shape and queue is not scored again. Each node's last score is kept per shape too, and only
    the nodes changed since (``Inventory.changes``) are looked up again.
    """
    hit = _scores(state, profile, req)
    stale = cand[~hit.valid[cand]]
    if len(stale):
        hit.value[stale] = _by_state(state, profile, req, stale, hit.known)
        hit.valid[stale] = True
    return hit.value[cand]


def _best_of(state: CycleState, profile: Profile, req: Request, mask: np.ndarray) -> np.ndarray:
    """The best-scoring node among those ``mask`` marks (ties: the lowest index), as a 1-array.

    The scores are :func:`score_distinct`'s. The shape's cache keeps them masked over the whole node
    array (``LOWEST`` where ``mask`` is false); after the first call only the nodes changed since
    the last one are scored and masked again, and one ``argmax`` picks the node.
    """
    hit = _scores(state, profile, req)
    changes = state.inventory.changes
    if hit.masked is None or hit.mask is not mask:
        stale = np.flatnonzero(mask & ~hit.valid)
        rows = None
    else:
        rows = sorted(set(changes[hit.mseen:]))
        if len(rows) <= FEW_STATES:  # numpy's fancy indexing costs more than a few nodes in Python
            stale = np.array([i for i in rows if mask[i] and not hit.valid[i]], np.int64)
        else:
            rows = np.array(rows, np.int64)
            stale = rows[mask[rows] & ~hit.valid[rows]]
    if len(stale):
        hit.value[stale] = _by_state(state, profile, req, stale, hit.known)
        hit.valid[stale] = True
    if rows is None:
        hit.masked, hit.mask = np.where(mask, hit.value, _LOWEST), mask
    elif isinstance(rows, list):
        for i in rows:
            hit.masked[i] = hit.value[i] if mask[i] else _LOWEST
    else:
        hit.masked[rows] = np.where(mask[rows], hit.value[rows], _LOWEST)
    hit.mseen = len(changes)
    return np.array([np.argmax(hit.masked)], np.int64)


_LOWEST = np.iinfo(np.int64).min


def _scores(state: CycleState, profile: Profile, req: Request) -> "_Scores":
    """The request shape's score cache, with the nodes changed since it was last read marked stale."""
    inv = state.inventory
    key = ("scores", id(profile), req.queue, req.shape_key())
    hit = state.cache.get(key)
    if hit is None:
        hit = state.cache[key] = _Scores(np.zeros(inv.n, np.int64), np.zeros(inv.n, bool), len(inv.changes))
    elif hit.seen < len(inv.changes):
        changed = inv.changes[hit.seen:]
        if len(changed) <= 8:
            for i in changed:
                hit.valid[i] = False
        else:
            hit.valid[changed] = False
        hit.seen = len(inv.changes)
    return hit


class _Scores:
    """One request shape's scores: per node (``value`` where ``valid``, synced up to
    ``Inventory.changes[:seen]``) and per node state (``known``: ``Inventory.sig`` -> score)."""

    __slots__ = ("value", "valid", "seen", "known", "masked", "mask", "mseen")

    def __init__(self, value: np.ndarray, valid: np.ndarray, seen: int):
        self.value, self.valid, self.seen = value, valid, seen
        self.known: dict[int, int] = {}
        self.masked: np.ndarray | None = None
        """``value`` where ``mask`` (the feasible nodes) is true, else ``_LOWEST`` (:func:`_best_of`)."""
        self.mask: np.ndarray | None = None
        self.mseen = 0


def _by_state(state: CycleState, profile: Profile, req: Request, cand: np.ndarray, known: dict) -> np.ndarray:
    sig = state.inventory.sig[cand]
    if len(cand) == 1:
        k = int(sig[0])
        v = known.get(k)
        if v is None:
            v = known[k] = int(profile.score(state, req, cand)[0])
        return np.array([v], np.int64)
    if len(cand) <= FEW_STATES:  # np.unique costs more than a few nodes in Python
        sigs = sig.tolist()
        firsts: dict[int, int] = {}
        for k, s in enumerate(sigs):
            firsts.setdefault(s, k)
        missing = sorted(s for s in firsts if s not in known)  # np.unique's order
        if missing:
            known.update(zip(missing, profile.score(state, req, cand[[firsts[s] for s in missing]]).tolist()))
        return np.array([known[s] for s in sigs], np.int64)
    uniq, first, inverse = np.unique(sig, return_index=True, return_inverse=True)
    if not known:  # the shape's first scoring: every state is new
        fresh = profile.score(state, req, cand[first])
        known.update(zip(uniq.tolist(), fresh.tolist()))
        return fresh.astype(np.int64, copy=False)[inverse]
    keys = uniq.tolist()
    values = [known.get(k) for k in keys]
    missing = [k for k, v in enumerate(values) if v is None]
    if missing:
        rows = np.array(missing, np.int64)
        fresh = profile.score(state, req, cand[first[rows]]).tolist()
        for k, v in zip(missing, fresh):
            values[k] = known[keys[k]] = v
    return np.array(values, np.int64)[inverse]


def _domains(state: CycleState, req: Request, feasible: np.ndarray, scores: np.ndarray) -> np.ndarray | None:
    """The feasible nodes of the best topology domain that holds the whole gang."""
    nodes = state.inventory.nodes
    by_value: dict[str, list[int]] = {}
    for k, i in enumerate(feasible):
        value = nodes[i].labels.get(req.topology_key or "")
        if value is not None:
            by_value.setdefault(value, []).append(k)
    best: tuple[int, str] | None = None
    for value, ks in sorted(by_value.items()):
        if len(ks) < req.nodes:
            continue
        top = int(np.sort(scores[ks])[::-1][:req.nodes].sum())
        if best is None or top > best[0]:
            best = (top, value)
    if best is None:
        return None
    return np.array(by_value[best[1]], np.int64)


def choose(state: CycleState, profile: Profile, req: Request) -> np.ndarray | None:
    """The node indexes the workers go to, best first; None when no node (or too few) fits."""
    if req.service is not None:  # a service replica: among every feasible node, spread first
        cand = service_spread.prefer(state, req, feasible(state, profile, req))
        if len(cand) < req.nodes:
            return None
        scores = score_distinct(state, profile, req, cand)
        order = np.lexsort((cand, -scores))
        return cand[order[:req.nodes]]
    if req.nodes == 1 and _wants_gpu(req):  # every feasible node is scored: pick over the node array
        cand, whole = _feasible(state, profile, req)
        if whole is not None:
            return _best_of(state, profile, req, whole) if len(cand) else None
    else:
        cand = candidates(state, profile, req)
    if len(cand) < req.nodes:
        return None
    scores = score_distinct(state, profile, req, cand)
    if req.nodes == 1:
        top = scores.max()
        return cand[scores == top].min(keepdims=True)
    if req.topology_key:
        ks = _domains(state, req, cand, scores)
        if ks is None:
            return None
        cand, scores = cand[ks], scores[ks]
    order = np.lexsort((cand, -scores))
    return cand[order[:req.nodes]]


def place(state: CycleState, profile: Profile, req: Request) -> list[Assignment] | None:
    """Assign every worker of ``req`` or none; None when it does not fit now."""
    picks = choose(state, profile, req)
    if picks is None:
        return None
    done: list[Assignment] = []
    for i in picks:
        a = assign_worker(state.inventory, req, int(i))
        if a is None:
            for prev in reversed(done):
                state.inventory.undo(prev)
            return None
        done.append(a)
    return done
