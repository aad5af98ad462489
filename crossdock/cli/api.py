"""``crossdock api`` (serve the REST API and the dashboard) and ``crossdock tokens`` (the API's
per-user bearer tokens: an admin's commands, run where the service's store is reachable)."""

from __future__ import annotations

import os
import pwd
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Optional

import typer

from crossdock.cli.common import console, fail, print_json, runtime
from crossdock.queue.errors import CrossdockError, StoreUnavailable
from crossdock.settings import current_user, is_admin

DEFAULT_PORT = 8400

tokens_app = typer.Typer(help="The REST API's bearer tokens (root or a config admin).", no_args_is_help=True)


def api(host: str = typer.Option("127.0.0.1", "--host", help="address to listen on (loopback by default)"),
        port: int = typer.Option(DEFAULT_PORT, "--port", min=1, max=65535),
        uds: Optional[Path] = typer.Option(None, "--uds", help="serve on this Unix socket instead: local users"
                                           " are known by their uid (SO_PEERCRED) and need no token"),
        log_level: str = typer.Option("info", "--log-level")) -> None:
    """Serve the REST API and the dashboard (http://HOST:PORT/) until Ctrl-C or SIGTERM."""
    from crossdock.api.app import create_app
    from crossdock.api.serve import serve

    rt = runtime()
    if host not in ("127.0.0.1", "localhost", "::1") and uds is None:
        console.print(f"crossdock api: warning: listening on {host}, beyond this machine; the API speaks plain"
                      " HTTP, so put a TLS proxy in front of it", highlight=False)
    where = f"unix socket {uds}" if uds else f"http://{host}:{port}/"
    console.print(f"crossdock api: serving {where} (the dashboard at /, the schema at /openapi.json)", highlight=False)
    serve(create_app(rt), host=host, port=port, uds=uds, log_level=log_level)


@contextmanager
def _store_errors() -> Iterator[None]:
    try:
        yield
    except StoreUnavailable as exc:
        fail(f"tokens: {exc}", code=1)


def _admin_runtime():
    rt = runtime()
    if not is_admin(rt.config.admins):
        fail(f"tokens: only root or a user in the config's admins manages tokens (you are {current_user()!r})")
    return rt


@tokens_app.command("create")
def create(user: str = typer.Argument(..., help="whom the token stands for"),
           admin: bool = typer.Option(False, "--admin", help="the token may act on every user's jobs"),
           as_json: bool = typer.Option(False, "--json")) -> None:
    """Make a token for USER and print it once (only its salted hash is kept)."""
    from crossdock.api import tokens

    rt = _admin_runtime()
    try:
        text, record = tokens.new_token(user, admin, current_user())
    except CrossdockError as exc:
        fail(str(exc))
    if os.geteuid() == 0 and not _has_account(user):  # a root service runs jobs as their owners
        fail(f"USER: {user!r} has no account on this machine, and a service run as root runs each job as its"
             " owner, so every job of theirs would fail at launch; make the account first (useradd), or give"
             " the token to an existing user")
    with _store_errors():
        if not rt.store.access.put_token(record, actor=current_user()):
            fail("tokens create: a token by that id exists already (a one-in-2^48 chance); run it again", code=1)
    if as_json:
        print_json({"token": text, "id": record["id"], "user": user, "admin": admin})
        return
    print(text)
    note = " (admin)" if admin else ""
    typer.echo(f"crossdock: token {record['id']} for {user}{note}, shown only now; it is sent as"
               " `Authorization: Bearer <token>`", err=True)


def _has_account(user: str) -> bool:
    try:
        pwd.getpwnam(user)
        return True
    except KeyError:
        return False


@tokens_app.command("list")
def list_tokens(as_json: bool = typer.Option(False, "--json")) -> None:
    """Every token: its id, user, grant, and who made it when (never the secret)."""
    with _store_errors():
        records = _admin_runtime().store.access.tokens()
    rows = [{k: rec.get(k) for k in ("id", "user", "admin", "created", "created_by")} for rec in records]
    if as_json:
        print_json(rows)
        return
    from rich.table import Table

    table = Table(box=None, header_style="bold")
    for col in ("ID", "USER", "ADMIN", "CREATED", "BY"):
        table.add_column(col)
    for r in rows:
        made = datetime.fromtimestamp(r["created"], timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        table.add_row(r["id"], r["user"], "yes" if r["admin"] else "no", made, r["created_by"] or "")
    console.print(table)


@tokens_app.command("revoke")
def revoke(token: str = typer.Argument(..., help="the token's id (from `tokens list`) or the token itself")) -> None:
    """Revoke a token: requests bearing it are refused from now on."""
    from crossdock.api.tokens import token_id

    token = token_id(token) or token
    with _store_errors():
        record = _admin_runtime().store.access.revoke_token(token, actor=current_user())
    if record is None:
        fail(f"TOKEN: no token {token!r}; `crossdock tokens list` shows their ids")
    typer.echo(f"token {token} of {record['user']}: revoked")
