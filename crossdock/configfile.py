"""The admin config read from a YAML file: ``load_config(path)`` → a validated :class:`ClusterConfig`.

The core (:mod:`crossdock.queue.config`) validates data it is handed; reading the file and
parsing YAML happen here, for the faces and the process wiring (runtime, CLI, client). Errors are
:class:`~crossdock.queue.errors.ConfigError` lines naming the file and, for broken YAML, the line
and column.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

import yaml

from crossdock.queue.config import ClusterConfig, parse_config
from crossdock.queue.errors import ConfigError
from crossdock.queue.ports import Capabilities

__all__ = ["load_config"]


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
    """A config from its YAML text; ``source`` names it in every error (a path, as given)."""
    p = source
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise ConfigError([f"{p}:{where}: not valid YAML: {getattr(exc, 'problem', exc)}"]) from None
    return parse_config(data, str(p), backends)
