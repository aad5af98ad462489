"""A job's spec sealed when it is stored, and its environment encrypted at rest.

Anyone who can write Redis could otherwise change what a pending job of root's runs, and anyone
who can read it could read the job's environment. So a job hash keeps:

- ``spec``: the spec's JSON, less its environment;
- ``env``: the environment's JSON encrypted with AES-GCM under a key derived from the owner's key
  (:func:`crossdock.signing.user_key`), with the job id as associated data (so one job's
  ciphertext does not open as another's);
- ``seal``: an HMAC-SHA256 under the owner's key over the job id, the spec's text less its hold
  flag (``hold``/``release`` flip it, and it only ever delays a job) and ``env``.

The owner's key is derived from the service's master key: only the service, or the owner with a
key the service issued them, makes a seal that opens, and a user's key seals only specs naming
that user, which run as that user. A spec that names root opens only with root's key. What runs a
job (the dispatch task, the local supervisor) reads it with :meth:`SpecSeals.refusal` and runs
nothing whose seal does not verify.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
import os
from functools import lru_cache
from pathlib import Path
from typing import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from crossdock import signing
from crossdock.backends.redis_store.codec import spec_from_json
from crossdock.queue.errors import CrossdockError
from crossdock.queue.models import Job, JobSpec

ENV, SEAL = "env", "seal"
"""The job hash's fields besides the spec and the status fields."""
BAD_SEAL = "BadSeal"
"""The reason's prefix of a job failed because its spec's seal does not verify."""
_NONCE = 12
_CACHE = 10_000


class SpecSeals:
    """Seals and opens job specs with their owners' keys (``key_of(user)``; a
    :class:`CrossdockError` from it means this process holds no key for that user)."""

    def __init__(self, key_of: Callable[[str], bytes]):
        self._key_of = key_of
        self._keys: dict[str, bytes | None] = {}
        self._ciphers: dict[bytes, AESGCM] = {}
        self.spec = lru_cache(maxsize=_CACHE)(self._spec)
        """The stored spec with its environment opened (empty when this process cannot open it)."""

    @classmethod
    def for_state_dir(cls, state_dir: Path) -> "SpecSeals":
        return cls(lambda user: signing.user_key(Path(state_dir), user))

    def key(self, user: str) -> bytes | None:
        if user not in self._keys:
            try:
                self._keys[user] = self._key_of(user)
            except CrossdockError:
                self._keys[user] = None
        return self._keys[user]

    def fields(self, job: Job) -> dict[str, str]:
        """The hash fields of ``job``'s spec: ``spec``, ``seal`` and (with an environment) ``env``.
        Raises :class:`CrossdockError` when this process holds no key for the owner."""
        spec = job.spec
        key = self._key_of(spec.user)
        text = spec.model_copy(update={"env": {}}).model_dump_json(exclude_defaults=True)
        out = {"spec": text}
        if spec.env:
            nonce = os.urandom(_NONCE)
            sealed = self._cipher(key).encrypt(nonce, json.dumps(spec.env).encode(), _env_aad(job.id))
            out[ENV] = base64.b64encode(nonce + sealed).decode()
        out[SEAL] = _mac(key, job.id, text, out.get(ENV, ""))
        return out

    def refusal(self, job_id: int, h: dict[str, str], user: str) -> str:
        """Why the spec in hash ``h`` must not run ("" when its seal verifies)."""
        what = f"the spec of job {job_id}"
        if not h.get(SEAL):
            return (f"{what} is unsealed (written to the store by something other than crossdock's submit);"
                    " refusing to run it")
        key = self.key(user)
        if key is None:
            return f"{what}: no key here to check its seal (owner {user!r}); refusing to run it"
        if not hmac.compare_digest(h[SEAL], _mac(key, job_id, h["spec"], h.get(ENV, ""))):
            return (f"{what} does not match its seal under its owner's ({user!r}) key: changed in the store"
                    " after it was submitted, or sealed by a client with a key the service did not issue (a"
                    " client reaching Redis itself needs CROSSDOCK_SIGNING_KEY from `crossdock issue-key`);"
                    " refusing to run it")
        return ""

    def _cipher(self, key: bytes) -> AESGCM:
        if key not in self._ciphers:
            self._ciphers[key] = AESGCM(hmac.new(key, b"crossdock-env", hashlib.sha256).digest())
        return self._ciphers[key]

    def _spec(self, raw: str, job_id: int, env: str) -> JobSpec:
        spec = spec_from_json(raw)
        if not env:
            return spec
        key = self.key(spec.user)
        try:
            blob = base64.b64decode(env)
            data = self._cipher(key).decrypt(blob[:_NONCE], blob[_NONCE:], _env_aad(job_id)) if key else b"{}"
            opened = json.loads(data)
        except (InvalidTag, ValueError, binascii.Error):  # not the owner's, or changed: the seal refuses it
            opened = {}
        return spec.model_copy(update={"env": opened}) if opened else spec


def _canonical(text: str) -> str:
    """The spec's text as sealed: without its hold flag, in one JSON spelling."""
    try:
        data = json.loads(text)
    except ValueError:
        return text
    if isinstance(data, dict):
        data.pop("hold", None)
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False, sort_keys=True)


def _mac(key: bytes, job_id: int, text: str, env: str) -> str:
    return signing.sign_text(key, f"spec:{job_id}", _canonical(text) + "\0" + env)


def _env_aad(job_id: int) -> bytes:
    return f"env:{job_id}".encode()
