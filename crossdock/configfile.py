"""The admin config read from a YAML file: ``load_config(path)`` → a validated :class:`ClusterConfig`.

The core (:mod:`crossdock.queue.config`) validates data it is handed; reading the file and
parsing YAML happen here, for the faces and the process wiring (runtime, CLI, client). Errors are
:class:`~crossdock.queue.errors.ConfigError` lines naming the file and a line: for broken YAML the
line and column of the break, for a config that fails validation (``queues.training.per_job.gpu:
must be ≥ 0``) the line of the key the error's path leads to (:func:`located`), every problem at once.

The values come from PyYAML (YAML 1.1: ``yes`` is true), as every process that reads a stored
config reads them, so a file means the same in ``config check`` and in force; ruamel.yaml's
round-trip loader, which keeps where each key and item sits, is read only for those lines, and only
once a config is refused.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

import yaml
from ruamel.yaml import YAML

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
    already is kept; the others stay in order."""
    tree = _positions(text)
    out = []
    for error in errors:
        if error.startswith(f"{source}:"):
            out.append(error)
            continue
        line = _line_of(tree, error) if tree is not None else None
        out.append(f"{source}:{line}: {error}" if line else f"{source}: {error}")
    return out


def _positions(text: str) -> Any:
    """The text as ruamel.yaml's round-trip tree (mappings and sequences that know the line of each
    key and item), or None where it reads the text differently from PyYAML and cannot load it."""
    reader = YAML(typ="rt", pure=True)
    reader.allow_duplicate_keys = True  # PyYAML keeps the last; positions follow the same key
    try:
        return reader.load(text)
    except Exception:  # positions are a help: never let them hide the errors they place
        return None


_INDEX = re.compile(r"\[(\d+)\]|\.?(\d+)(?=[.:\[]|$)")


def _line_of(tree: Any, error: str) -> int | None:
    """Walk ``error``'s leading path (``pools.gpu.nodes[0].cpus``, ``queues.q.pools.1``; a key may
    hold dots, ``nvidia.com/gpu``) down ``tree``, and on into a message that starts with a key of
    where it stopped (``scheduler: interval_seconds: must be ≤ …``, a model's own check)."""
    node, rest, line = tree, error, None
    while True:
        if isinstance(node, dict):
            key = _longest_key(node, rest)
            if key is None:
                return line
            try:
                line = node.lc.key(key)[0] + 1
            except (AttributeError, KeyError, TypeError):  # a key merged in (<<: *anchor) has no position of its own
                return line
            node, rest = node[key], rest[len(str(key)):]
        elif isinstance(node, list) and (m := _INDEX.match(rest)):
            i = int(m.group(1) or m.group(2))
            if i >= len(node):
                return line
            try:
                line = node.lc.item(i)[0] + 1
            except (AttributeError, KeyError, TypeError):
                return line
            node, rest = node[i], rest[m.end():]
        else:
            return line
        if rest.startswith("."):
            rest = rest[1:]
        elif rest.startswith(": "):
            rest = rest[2:]
        elif not rest.startswith("["):
            return line


def _longest_key(node: dict, rest: str) -> Any:
    """The longest key of ``node`` that ``rest`` starts with, followed by the end of a path segment."""
    best = None
    for key in node:
        name = str(key)
        if rest.startswith(name) and (len(rest) == len(name) or rest[len(name)] in ".:["):
            if best is None or len(name) > len(str(best)):
                best = key
    return best
