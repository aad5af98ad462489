"""``#SBATCH`` directives, read from a batch script the way sbatch reads them (pure).

Lines are read from the top of the script until the first line that is neither blank nor a
comment (the shebang is a comment). Each line is split as sbatch's ``_get_argument`` splits
it: blanks separate words, ``'`` and ``"`` quote, ``\\`` escapes the next character (inside
quotes too), an unquoted ``#`` ends the line.
"""

from __future__ import annotations

from crossdock.queue.errors import InvalidOption

MAGIC = "#SBATCH"
# C's isspace() in the "C" locale: what sbatch splits directive words on.
_BLANKS = " \t\n\v\f\r"


class InvalidDirective(InvalidOption):
    """An ``#SBATCH`` line that sbatch would refuse; ``line`` is its 1-based line number."""

    def __init__(self, option: str, value: object, accepted: str, line: int):
        super().__init__(option, value, accepted)
        self.line = line
        Exception.__init__(self, f"#SBATCH line {line}: {option}: invalid value {value!r}; accepted: {accepted}")


# --- #SBATCH directives ---------------------------------------------------------------------


def _directive_words(rest: str, line: int) -> list[str]:
    """Split the text after ``#SBATCH`` the way sbatch's ``_get_argument`` does."""
    words: list[str] = []
    i, n = 0, len(rest)
    while True:
        while i < n and rest[i] in _BLANKS:
            i += 1
        if i >= n:
            return words
        if rest[i] == ":":
            raise InvalidDirective(MAGIC, rest.strip(), "options, not a ':' heterogeneous-job separator", line)
        word: list[str] = []
        quote = ""
        escaped = False
        while i < n and (quote or rest[i] not in _BLANKS):
            ch = rest[i]
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
                i += 1
                continue
            elif quote:
                if ch == quote:
                    quote = ""
                    i += 1
                    continue
            elif ch in "\"'":
                quote = ch
                i += 1
                continue
            elif ch == "#":
                break  # an unquoted, unescaped '#' starts a comment
            word.append(ch)
            i += 1
        if quote:
            raise InvalidDirective(MAGIC, rest.strip(), f"quoted words; unmatched {quote} in the line", line)
        if not word:
            # sbatch's _get_argument returns NULL for an empty word: the rest of the line is ignored.
            return words
        words.append("".join(word))


def directive_tokens(script_text: str) -> list[tuple[str, int]]:
    tokens: list[tuple[str, int]] = []
    for lineno, line in enumerate(script_text.split("\n"), start=1):
        if line.startswith(MAGIC):
            words = _directive_words(line[len(MAGIC):], lineno)
            if words and words[0].lower() in ("hetjob", "packjob"):
                raise InvalidDirective(MAGIC, words[0], "one job per script; heterogeneous jobs are not supported", lineno)
            tokens.extend((w, lineno) for w in words)
            continue
        stripped = line.lstrip(_BLANKS)
        if stripped and not stripped.startswith("#"):
            break  # the first command ends the directives
    return tokens


def read_sbatch_directives(script_text: str) -> list[str]:
    """The argv that the script's ``#SBATCH`` lines give, in order."""
    return [word for word, _ in directive_tokens(script_text)]
