"""The local backend: this machine as one node, each job under a detached supervisor."""

from __future__ import annotations

from crossdock.queue.ports import Capabilities

CAPABILITIES = Capabilities(heartbeat=True)


def create(ctx):
    from crossdock.backends.local.backend import LocalBackend

    return LocalBackend(ctx.store, ctx.config, ctx.state_dir, dict(ctx.child_env))
