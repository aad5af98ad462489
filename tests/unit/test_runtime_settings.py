"""A Python job's runner reaches an embedded Redis without its password in the job's environment."""

from crossdock.backends.redis_store import embedded


def test_the_url_a_job_carries_has_no_password_and_the_runner_finds_it_in_the_state_dir(tmp_path):
    sock = embedded.socket_path(tmp_path)
    embedded.password_path(tmp_path).write_text("s3cret\n")
    carried = embedded.without_password(f"unix://:s3cret@{sock}")
    assert carried == f"unix://{sock}" and "s3cret" not in carried
    assert embedded.with_password(carried) == f"unix://:s3cret@{sock}"


def test_other_urls_pass_through_both_ways(tmp_path):
    assert embedded.without_password("redis://user:pw@host:6379/0") == "redis://host:6379/0"
    assert embedded.with_password("redis://host:6379/0") == "redis://host:6379/0"
    assert embedded.with_password(f"unix://{tmp_path / 'elsewhere.sock'}") == f"unix://{tmp_path / 'elsewhere.sock'}"
    # a state dir whose password this user cannot read (or that has none): the URL as given
    assert embedded.with_password(f"unix://{embedded.socket_path(tmp_path)}") == f"unix://{embedded.socket_path(tmp_path)}"
