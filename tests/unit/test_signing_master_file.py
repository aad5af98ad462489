"""One signing key for every pod of an installation: CROSSDOCK_MASTER_KEY_FILE (the Helm chart's Secret)."""

from __future__ import annotations

import pytest

from crossdock import signing
from crossdock.queue.errors import CrossdockError


def test_two_state_directories_sharing_the_key_file_verify_each_others_seals(tmp_path, monkeypatch):
    key = tmp_path / "secret" / "hmac.key"
    key.parent.mkdir()
    key.write_bytes(b"k" * 32)
    monkeypatch.setenv(signing.MASTER_KEY_ENV, str(key))
    api_pod, worker_pod = tmp_path / "api", tmp_path / "worker"
    sealed = signing.seal(signing.user_key(api_pod, "alice"), "payload", b"data")
    assert signing.unseal(signing.user_key(worker_pod, "alice"), "payload", sealed, "it") == b"data"
    assert not (api_pod / signing.KEY_FILE).exists() and not (worker_pod / signing.KEY_FILE).exists()


def test_a_named_key_file_that_is_missing_is_one_error_naming_the_variable(tmp_path, monkeypatch):
    monkeypatch.setenv(signing.MASTER_KEY_ENV, str(tmp_path / "nowhere"))
    with pytest.raises(CrossdockError, match="CROSSDOCK_MASTER_KEY_FILE=.*nowhere: no such file"):
        signing.user_key(tmp_path / "state", "alice")
    assert not (tmp_path / "nowhere").exists()


def test_without_the_variable_the_state_directory_keeps_its_own_key(tmp_path, monkeypatch):
    monkeypatch.delenv(signing.MASTER_KEY_ENV, raising=False)
    assert signing.user_key(tmp_path, "alice") == signing.derive((tmp_path / signing.KEY_FILE).read_bytes(), "alice")
