"""``crossdock config apply FILE`` and ``crossdock config show``: change the admin config of a
running crossdock, and print the one in force."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import typer

from crossdock.cli.common import fail, one_line, print_json, runtime


def config_apply(path: Path = typer.Argument(..., help="the new crossdock YAML config, whole"),
                 wait: float = typer.Option(10.0, "--wait", help="seconds to wait for the leader to switch"
                                            " (0: store and return)"),
                 as_json: bool = typer.Option(False, "--json")) -> None:
    """Validate a config whole (as `config check`), print what changes for which priority class,
    pool and queue, and store it for the leader, which switches at its next cycle boundary.
    A config with any error is refused whole; the running one stays."""
    from crossdock.queue.errors import ConfigError
    from crossdock.settings import current_user, is_admin
    from crossdock.workers.liveconfig import apply_file

    rt = runtime()
    if not is_admin(rt.config.admins):
        fail(f"config apply: {current_user()} is not an admin (root or one listed in admins: of the config in force)",
             code=1)
    try:
        applied = apply_file(rt, path, current_user())
    except ConfigError as exc:
        for line in exc.errors:
            typer.echo(one_line(line if line.startswith(f"{path}:") else f"{path}: {line}"), err=True)
        typer.echo(f"{path}: refused; the config in force stays", err=True)
        raise typer.Exit(2)
    holder = rt.store.lease_holder()
    in_force = rt.store.live_config.in_force_version()
    deadline = time.monotonic() + wait
    while holder and in_force < applied.version and time.monotonic() < deadline:
        time.sleep(0.1)
        in_force = rt.store.live_config.in_force_version()
    done = in_force >= applied.version
    if as_json:
        print_json({"version": applied.version, "new": applied.new, "in_force": done, "leader": holder,
                    "changes": [c.to_json() for c in applied.changes], "warnings": applied.warnings})
        return
    for w in applied.warnings:
        typer.echo(one_line(f"{path}: warning: {w}"), err=True)
    watched = Path(rt.settings.config_path)
    if applied.new and watched.absolute() != Path(path).absolute():
        typer.echo(f"note: `crossdock up` refuses an edit of {watched} that takes this back, until the file"
                   f" carries it (`crossdock config show > {watched}`)", err=True)
    for change in applied.changes:
        typer.echo(one_line(str(change)))
    if not applied.changes:
        typer.echo("no change")
    if done:
        typer.echo(f"version {applied.version} in force (leader {holder})")
    elif holder:
        typer.echo(f"version {applied.version} stored; leader {holder} has not switched to it within {wait:g}s")
    else:
        typer.echo(f"version {applied.version} stored; no scheduler holds the lease: the next leader takes it")


def config_show(as_json: bool = typer.Option(False, "--json", help="the record: version, source, who, when, text")) -> None:
    """Print the config in force (YAML on stdout; where it came from on stderr)."""
    from crossdock.workers.liveconfig import in_force_text

    rt = runtime()
    text, record = in_force_text(rt)
    pending = rt.store.live_config.desired()
    waiting = pending is not None and (record is None or pending["version"] > record["version"])
    if as_json:
        print_json({"version": record["version"] if record else 0,
                    "source": record.get("source") if record else str(rt.settings.config_path),
                    "by": record.get("by") if record else None, "holder": record.get("holder") if record else None,
                    "switched_at": float(record["switched_at"]) if record else None,
                    "pending_version": pending["version"] if waiting else None, "text": text})
        return
    if record is None:
        origin = f"# the file {rt.settings.config_path} (no live change applied)"
    else:
        when = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(record["switched_at"])))
        origin = (f"# version {record['version']} from {record.get('source')}, stored by {record.get('by')},"
                  f" in force since {when} (leader {record.get('holder')})")
    typer.echo(origin, err=True)
    if waiting:
        typer.echo(f"# version {pending['version']} is stored and waits for the leader's next cycle", err=True)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")
