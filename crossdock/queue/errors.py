"""Error roots. Messages name the field, the value and the fix."""

from __future__ import annotations


class CrossdockError(Exception):
    """Root of every error crossdock raises on purpose."""


class ConfigError(CrossdockError):
    """An admin config file is invalid. ``errors`` holds one ``path: message`` line per problem."""

    def __init__(self, errors: list[str]):
        self.errors = list(errors)
        super().__init__("\n".join(self.errors))


def shown(value: object, limit: int = 200) -> str:
    """``repr(value)``, cut to ``limit`` characters: a 1 MB value makes no readable message."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}… ({len(text)} characters)"


class InvalidArgument(CrossdockError, ValueError):
    """An argument of the Python API that crossdock cannot accept; the message names it."""


class InvalidOption(CrossdockError):
    """A submission option has a value crossdock cannot accept."""

    def __init__(self, option: str, value: object, accepted: str):
        self.option, self.value, self.accepted = option, value, accepted
        what = "unknown option or missing value" if value is None else f"invalid value {shown(value)}"
        super().__init__(f"{option}: {what}; accepted: {accepted}")


class InvalidOptions(InvalidOption):
    """Several options refused at once, one line each; ``option``/``value``/``accepted`` are the first's."""

    def __init__(self, errors: list[InvalidOption]):
        first = errors[0]
        self.errors = list(errors)
        super().__init__(first.option, first.value, first.accepted)
        Exception.__init__(self, "\n".join(str(e) for e in errors))


class InvalidJob(CrossdockError):
    """A job spec is valid on its own but cannot run under this config (unknown queue, too large…)."""


class LimitExceeded(InvalidJob):
    """A submission or request over one of the config's ``limits:`` (its key in the message)."""


class StoreUnavailable(CrossdockError):
    """The store does not answer (down, restarting, failing over): nothing was decided; a retry
    with the same idempotency token stores a submission once."""


class LeaseLost(CrossdockError):
    """A leader's write refused because another holds the scheduler's lease now (this one paused
    past it): the write's transaction checked the lease, so nothing of it landed."""


class IllegalTransition(CrossdockError):
    def __init__(self, job_id: int | None, old: object, new: object):
        self.job_id, self.old, self.new = job_id, old, new
        super().__init__(f"job {job_id}: illegal state transition {old} -> {new}")


class NoSuchJob(CrossdockError):
    def __init__(self, job_id: object):
        self.job_id = job_id
        super().__init__(f"no such job: {job_id}")


class PermissionDenied(CrossdockError):
    """The caller is neither the owner of the job nor an admin (or claims to be someone else)."""


class BadSignature(CrossdockError):
    """A payload or result that crossdock would unpickle is unsigned or its seal does not match."""
