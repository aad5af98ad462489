"""``crossdock config apply FILE`` and ``crossdock config show``: change the admin config of a
running crossdock, and print the one in force."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

from crossdock.cli.common import fail, gateway, one_line, print_json


def config_apply(path: Path = typer.Argument(..., help="the new crossdock YAML config, whole"),
                 wait: float = typer.Option(10.0, "--wait", help="seconds to wait for the leader to switch"
                                            " (0: store and return)"),
                 as_json: bool = typer.Option(False, "--json")) -> None:
    """Validate a config whole (as `config check`), print what changes for which priority class,
    pool and queue, and store it for the leader, which switches at its next cycle boundary.
    A config with any error is refused whole; the running one stays. The file is read here, with
    your rights; a multi-user service gets its text through its socket (admins only)."""
    from crossdock.queue.errors import ConfigError, PermissionDenied

    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        fail(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}")
    try:
        applied = gateway().apply_config(text, str(path.absolute()), wait)
    except PermissionDenied as exc:
        fail(str(exc), code=1)
    except ConfigError as exc:
        for line in exc.errors:
            named = line.startswith((f"{path}:", f"{path.absolute()}:"))
            typer.echo(one_line(line if named else f"{path}: {line}"), err=True)
        typer.echo(f"{path}: refused; the config in force stays", err=True)
        raise typer.Exit(2)
    version, holder, done = applied["version"], applied["leader"], applied["in_force"]
    if as_json:
        print_json({k: applied[k] for k in ("version", "new", "in_force", "leader", "changes", "warnings")})
        return
    for w in applied["warnings"]:
        typer.echo(one_line(f"{path}: warning: {w}"), err=True)
    watched = Path(applied["watched"])
    if applied["new"] and watched.absolute() != path.absolute():
        typer.echo(f"note: `crossdock up` refuses an edit of {watched} that takes this back, until the file"
                   f" carries it (`crossdock config show > {watched}`)", err=True)
    for change in applied["lines"]:
        typer.echo(one_line(change))
    if not applied["lines"]:
        typer.echo("no change")
    if done:
        typer.echo(f"version {version} in force (leader {holder})")
    elif holder:
        typer.echo(f"version {version} stored; leader {holder} has not switched to it within {wait:g}s")
    else:
        typer.echo(f"version {version} stored; no scheduler holds the lease: the next leader takes it")


def config_show(as_json: bool = typer.Option(False, "--json", help="the record: version, source, who, when, text")) -> None:
    """Print the config in force (YAML on stdout; where it came from on stderr)."""
    shown = gateway().config_in_force()
    text, record, pending = shown["text"], shown["record"], shown["pending_version"]
    if as_json:
        print_json({"version": record["version"] if record else 0,
                    "source": record.get("source") if record else shown["path"],
                    "by": record.get("by") if record else None, "holder": record.get("holder") if record else None,
                    "switched_at": float(record["switched_at"]) if record else None,
                    "pending_version": pending, "text": text})
        return
    if record is None:
        origin = f"# the file {shown['path']} (no live change applied)"
    else:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(record["switched_at"])))
        origin = (f"# version {record['version']} from {record.get('source')}, stored by {record.get('by')},"
                  f" in force since {when} (leader {record.get('holder')})")
    typer.echo(origin, err=True)
    if pending is not None:
        typer.echo(f"# version {pending} is stored and waits for the leader's next cycle", err=True)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
