"""The #SBATCH corpus (tests/data/sbatch-corpus): each script accepted, or refused with the reason."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from crossdock.queue.errors import InvalidOption
from crossdock.queue.sbatch import build_spec

CORPUS = sorted((Path(__file__).parents[1] / "data" / "sbatch-corpus").glob("*.sh"))


def expectation(text: str) -> str:
    found = re.search(r"^# crossdock-expect: (.+)$", text, re.M)
    assert found, "every corpus script says what crossdock should do with it"
    return found.group(1)


def test_the_corpus_has_thirty_scripts_each_saying_what_it_models():
    assert len(CORPUS) >= 30
    assert all(re.search(r"^# crossdock-corpus: \S", p.read_text(), re.M) for p in CORPUS)


@pytest.mark.parametrize("path", CORPUS, ids=[p.name for p in CORPUS])
def test_each_script_is_accepted_or_refused_with_its_reason(path):
    text = path.read_text()
    expected = expectation(text)
    if expected == "accepted":
        sub = build_spec([], script_text=text, script_path=str(path))
        assert sub.spec.script == text
        return
    reason = expected.removeprefix("refused: ")
    with pytest.raises(InvalidOption) as err:
        build_spec([], script_text=text, script_path=str(path))
    message = str(err.value)
    assert reason in message and "\n" not in message and message.startswith("#SBATCH line ")


def test_a_repeated_ignored_option_warns_once():
    sub = build_spec([], script_text=(CORPUS[0].parent / "03-princeton-mail.sh").read_text())
    assert sum("--mail-type" in w for w in sub.warnings) == 1
