"""``Client.submit_specs`` retries while the store or the service does not answer, with the same
idempotency token every time, then raises the last error itself; any other error at once."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from crossdock import client as api
from crossdock.gateway.wire import ServiceUnavailable
from crossdock.queue.errors import InvalidJob, StoreUnavailable


class Gateway:
    def __init__(self, *answers):
        self.answers, self.tokens = list(answers), []

    def submit(self, specs, token):
        self.tokens.append(token)
        answer = self.answers.pop(0) if len(self.answers) > 1 else self.answers[0]
        if isinstance(answer, Exception):
            raise answer
        return [SimpleNamespace(id=i) for i in answer]


def client_over(gateway) -> api.Client:
    client = api.Client.__new__(api.Client)
    client.gateway = gateway
    return client


def test_a_store_that_comes_back_stores_the_submission_once_with_one_token():
    gw = Gateway(StoreUnavailable("away"), ServiceUnavailable("restarting"), [7, 8])
    handles = client_over(gw).submit_specs(["spec", "spec"], token="tok-1", watched=False)
    assert [h.id for h in handles] == [7, 8]
    assert gw.tokens == ["tok-1"] * 3


def test_a_store_that_stays_away_raises_its_own_error_with_every_try_on_one_token(monkeypatch):
    monkeypatch.setattr(api, "SUBMIT_RETRY_SECONDS", 0.35)
    gw = Gateway(StoreUnavailable("the store does not answer"))
    with pytest.raises(StoreUnavailable, match="the store does not answer"):
        client_over(gw).submit_specs(["spec"], watched=False)
    assert len(gw.tokens) >= 2 and len(set(gw.tokens)) == 1 and gw.tokens[0]


def test_a_refusal_is_not_retried():
    gw = Gateway(InvalidJob("queue: unknown"), [1])
    with pytest.raises(InvalidJob):
        client_over(gw).submit_specs(["spec"], watched=False)
    assert len(gw.tokens) == 1
