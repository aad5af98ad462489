"""Which environment variables may travel with a job: never crossdock's own secrets.

A CLI submit stores the exported environment in Redis (and so in its AOF), and a job receives
it; neither may carry the credentials of crossdock or of what it talks to. The deny-list is here,
in one place; the CLI, the Python API and the local runner all filter through :func:`exportable`.
"""

from __future__ import annotations

import re

SECRET_NAMES = frozenset({"CROSSDOCK_REDIS_URL", "CROSSDOCK_SIGNING_KEY", "REDIS_URL", "REDISCLI_AUTH",
                          "SLURM_JWT", "SLURM_LOCAL_JWT"})
"""Exact names: the store's URL (it may hold a password), the user's signing key file, Slurm's JWTs."""
SECRET_PATTERN = re.compile(r"(CROSSDOCK|REDIS)_\w*(PASSWORD|PASS|SECRET|TOKEN|KEY|AUTH|CREDENTIALS?)\w*")
"""Any ``CROSSDOCK_*``/``REDIS_*`` password, secret, token, key or credential."""


def exportable(env: dict[str, str], service_env: dict[str, str] | None = None) -> dict[str, str]:
    """``env`` without the secrets above, nor a ``KUBECONFIG`` that is the service's own."""
    service_kubeconfig = (service_env or {}).get("KUBECONFIG")
    return {k: v for k, v in env.items()
            if k not in SECRET_NAMES and not SECRET_PATTERN.fullmatch(k)
            and not (k == "KUBECONFIG" and service_kubeconfig and v == service_kubeconfig)}
