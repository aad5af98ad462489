"""``crossdock issue-key USER``: give a user the signing key their Python API clients need."""

from __future__ import annotations

import os
import pwd
from pathlib import Path
from typing import Optional

import typer

from crossdock import signing
from crossdock.cli.common import fail
from crossdock.settings import Settings


def issue_key(user: str = typer.Argument(..., help="login name of the user"),
              output: Optional[Path] = typer.Option(None, "--output", "-o",
                                                    help="where to write it (default ~USER/.config/crossdock/signing.key)")) -> None:
    """Write USER's signing key (derived from the service's key) as a 0600 file of theirs.

    The user's Python API clients seal their payloads and check their results with it; they name
    it in CROSSDOCK_SIGNING_KEY. Root only (it reads the service's key and gives the file away)."""
    if os.geteuid() != 0:
        fail("issue-key: run it as root (it reads the service's key and gives the file to the user)")
    try:
        entry = pwd.getpwnam(user)
    except KeyError:
        fail(f"USER: {user!r} has no passwd entry; give a login name")
    path = output or Path(entry.pw_dir) / ".config" / "crossdock" / "signing.key"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        signing.issue_user_key(Settings.from_env().state_dir, user, entry.pw_uid, entry.pw_gid, path)
    except OSError as exc:
        fail(f"--output: cannot write {str(path)!r}: {exc.strerror}")
    print(f"{path}: set CROSSDOCK_SIGNING_KEY={path} in {user}'s environment")
