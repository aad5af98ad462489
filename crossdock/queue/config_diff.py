"""What changes between two admin configs, by priority class, pool and queue.

``diff_configs(old, new)`` returns one :class:`Change` per named thing added, removed or changed
(``queues.training``, ``pools.l4``, ``priority_classes.inference``) and per changed top-level
setting (``scheduler``, ``autoscaler``, ``admins``, ``default_queue``); a changed thing lists its
changed fields by dotted path with the old and the new value. ``str(change)`` is the line
``crossdock config apply`` prints and the config event records::

    queues.training: weight 1 → 3; per_job.gpu 8 → 4
    pools.extra: added (backend local)
    priority_classes.batch: removed
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from crossdock.queue.config import ClusterConfig

SECTIONS = ("priority_classes", "pools", "queues")
"""The named sections: each entry is added, removed or changed on its own."""
SETTINGS = ("default_queue", "scheduler", "autoscaler", "admins", "licenses")

Kind = Literal["added", "removed", "changed"]


@dataclass(frozen=True)
class Change:
    section: str
    name: str | None
    """The entry's name in a named section; None for a top-level setting."""
    kind: Kind
    fields: tuple[tuple[str, Any, Any], ...] = field(default_factory=tuple)
    """(dotted path, old, new) of every changed field (``changed`` only)."""
    summary: str = ""
    """What an added entry is, in a few words (its backend, its class and pools)."""

    @property
    def path(self) -> str:
        return self.section if self.name is None else f"{self.section}.{self.name}"

    def __str__(self) -> str:
        if self.kind == "added":
            return f"{self.path}: added" + (f" ({self.summary})" if self.summary else "")
        if self.kind == "removed":
            return f"{self.path}: removed"
        return f"{self.path}: " + "; ".join(f"{p or 'value'} {_shown(a)} → {_shown(b)}" for p, a, b in self.fields)

    def to_json(self) -> dict[str, Any]:
        return {"path": self.path, "kind": self.kind, "summary": self.summary,
                "fields": [{"field": p, "old": a, "new": b} for p, a, b in self.fields]}


def _shown(value: Any) -> str:
    if value is None:
        return "unset"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    if isinstance(value, (str, int, float, bool)):
        return str(value)
    return json.dumps(value, sort_keys=True, default=str)


def _leaves(old: Any, new: Any, prefix: str = "") -> list[tuple[str, Any, Any]]:
    """The dotted paths where two dumped values differ (dicts compared key by key, the rest whole)."""
    if isinstance(old, dict) and isinstance(new, dict):
        out: list[tuple[str, Any, Any]] = []
        for key in [*old, *(k for k in new if k not in old)]:
            sub = f"{prefix}.{key}" if prefix else str(key)
            out += _leaves(old.get(key), new.get(key), sub)
        return out
    return [] if old == new else [(prefix, old, new)]


def _summary(section: str, entry: dict[str, Any]) -> str:
    if section == "pools":
        return f"backend {entry['backend']}" + (f", partition {entry['partition']}" if entry.get("partition") else "")
    if section == "queues":
        return f"class {entry['priority_class']}, pools {', '.join(entry['pools'])}"
    return f"value {entry['value']}" + (", preemptible" if entry.get("preemptible") else "")


def diff_configs(old: ClusterConfig, new: ClusterConfig) -> list[Change]:
    """Every difference, named sections first (classes, pools, queues), then the settings."""
    a, b = old.model_dump(mode="json"), new.model_dump(mode="json")
    changes: list[Change] = []
    for section in SECTIONS:
        before, after = a[section], b[section]
        for name in before:
            if name not in after:
                changes.append(Change(section, name, "removed"))
            elif fields := _leaves(before[name], after[name]):
                changes.append(Change(section, name, "changed", tuple(fields)))
        changes += [Change(section, name, "added", summary=_summary(section, after[name]))
                    for name in after if name not in before]
    for setting in SETTINGS:
        if fields := _leaves(a[setting], b[setting]):
            changes.append(Change(setting, None, "changed", tuple(fields)))
    return changes


def reverted(base: ClusterConfig, applied: ClusterConfig, new: ClusterConfig) -> list[Change]:
    """The changes from ``base`` to ``applied`` that ``new`` takes back: an entry ``applied``
    added that ``new`` lacks, one it removed that ``new`` has again, a field it changed that
    ``new`` has at ``base``'s value. ``new`` may change the same things further (a third value,
    an entry removed after it was changed): those are edits of their own, not a revert."""
    later = {c.path: c for c in diff_configs(applied, new)}
    out = []
    for change in diff_configs(base, applied):
        after = later.get(change.path)
        if after is None:
            continue
        if change.kind == "added" and after.kind == "removed" or change.kind == "removed" and after.kind == "added":
            out.append(change)
        elif change.kind == "changed" and after.kind == "changed":
            back = {p: b for p, _a, b in after.fields}
            undone = tuple(f for f in change.fields if f[0] in back and back[f[0]] == f[1])
            if undone:
                out.append(Change(change.section, change.name, "changed", undone))
    return out
