"""The admin config read from a YAML file: ``load_config(path)`` → a validated :class:`ClusterConfig`.

The core (:mod:`crossdock.queue.config`) validates data it is handed; reading the file and
parsing YAML happen here, for the faces and the process wiring (runtime, CLI, client). Errors are
:class:`~crossdock.queue.errors.ConfigError` lines naming the file and a line: for broken YAML the
line and column of the break, for a config that fails validation (``queues.training.per_job.gpu:
must be ≥ 0``) the line of the key the error's path leads to (:func:`located`), every problem at once.

The values come from PyYAML (YAML 1.1: ``yes`` is true), as every process that reads a stored
config reads them, so a file means the same in ``config check`` and in force; ruamel.yaml composes
the same text into its node tree, which keeps where each key and item sits, only for those lines
and only once a config is refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

import yaml
from ruamel.yaml import YAML
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from crossdock.queue.config import ClusterConfig, parse_config
from crossdock.queue.errors import ConfigError
from crossdock.queue.ports import Capabilities

__all__ = ["load_config", "load_text", "located"]


def load_config(path: str | Path, backends: Mapping[str, Capabilities] | None = None) -> ClusterConfig:
    """``backends``: the kinds pools may name, with what each can do (``crossdock.backends.registry.catalog()``)."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as exc:
        raise ConfigError([f"{p}: cannot read: {exc.strerror}"]) from None
    except UnicodeDecodeError as exc:
        raise ConfigError([f"{p}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} at offset {exc.start});"
                           " save it as UTF-8"]) from None
    except ValueError:  # a NUL in the path
        raise ConfigError([f"{p}: not a file name (it holds a NUL character)"]) from None
    return load_text(text, str(p), backends)


def load_text(text: str, source: str, backends: Mapping[str, Capabilities] | None = None) -> ClusterConfig:
    """A config from its YAML text; ``source`` names it in every error (a path, as given), with
    the line of each problem."""
    p = source
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError([f"{p}:{where}: not valid YAML: {getattr(exc, 'problem', exc)}"]) from None
    try:
        return parse_config(data, str(p), backends)
    except ConfigError as exc:
        raise ConfigError(located(exc.errors, text, source)) from None


def located(errors: list[str], text: str, source: str) -> list[str]:
    """``path: message`` lines of the config ``text`` as ``source:LINE: path: message``, LINE the
    1-based line of the deepest key or item of ``path`` the text has (a missing field: the mapping
    it is missing from; no such key at all: ``source: path: message``). A line naming ``source``
    already is kept. In the file's order, as a compiler lists them: those without a line first."""
    tree = _positions(text)
    out: list[tuple[int, str]] = []
    for error in errors:
        if error.startswith(f"{source}:"):
            out.append((0, error))
            continue
        line = _line_of(tree, error) if tree is not None else None
        out.append((line or 0, f"{source}:{line}: {error}" if line else f"{source}: {error}"))
    return [error for _, error in sorted(out, key=lambda entry: entry[0])]


def _positions(text: str) -> Node | None:
    """The text's YAML node tree (ruamel.yaml composes it: every key and item with its place), or
    None where ruamel.yaml cannot read what PyYAML did."""
    try:
        return YAML(typ="rt", pure=True).compose(text)
    except Exception:  # positions are a help: never let them hide the errors they place
        return None


_INDEX = re.compile(r"\[(\d+)\]|(\d+)(?=[.:\[]|$)")


def _line_of(node: Node, error: str) -> int | None:
    """Walk ``error``'s leading path (``pools.gpu.nodes[0].cpus``, ``queues.q.pools.1``; a key may
    hold dots, ``nvidia.com/gpu``) down the tree, and on into a message that starts with a key of
    where it stopped (``scheduler: interval_seconds: must be ≤ …``, a model's own check)."""
    rest, line = error, None
    while True:
        if isinstance(node, MappingNode):
            found = _entry(node, rest)
            if found is None:
                return line
            key, node = found
            line, rest = key.start_mark.line + 1, rest[len(key.value):]
        elif isinstance(node, SequenceNode) and (m := _INDEX.match(rest)):
            i = int(m.group(1) or m.group(2))
            if i >= len(node.value):
                return line
            node = node.value[i]
            line, rest = node.start_mark.line + 1, rest[m.end():]
        else:
            return line
        if rest.startswith("."):
            rest = rest[1:]
        elif rest.startswith(": "):
            rest = rest[2:]
        elif not rest.startswith("["):
            return line


def _entry(node: MappingNode, rest: str) -> tuple[ScalarNode, Node] | None:
    """The (key, value) of ``node`` whose key is the longest that ``rest`` starts with, up to the end
    of a path segment. Of two equal keys the last (PyYAML keeps it); a key merged in (``<<: *base``)
    where the mapping does not set it, at its anchor's place."""
    def fits(key: Node) -> int:
        name = key.value if isinstance(key, ScalarNode) else None
        ok = name is not None and rest.startswith(name) and (len(rest) == len(name) or rest[len(name)] in ".:[")
        return len(name) if ok else -1

    own = [(k, v) for k, v in node.value if not (isinstance(k, ScalarNode) and k.tag.endswith(":merge"))]
    merged = [pair for k, v in node.value if isinstance(k, ScalarNode) and k.tag.endswith(":merge")
              for m in (v.value if isinstance(v, SequenceNode) else [v]) if isinstance(m, MappingNode)
              for pair in m.value]
    for pairs in (own, merged):
        best = max(reversed(pairs), key=lambda pair: fits(pair[0]), default=None)
        if best is not None and fits(best[0]) >= 0:
            return best
    return None
