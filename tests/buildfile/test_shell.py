"""shell: tokens with offsets, simple commands and their separators, POSIX quote removal."""

from __future__ import annotations

import shlex

import pytest

from pinguard.buildfile.shell import Token, simple_commands, split_commands, tokenize, unquote


def test_tokens_and_offsets() -> None:
    """Words and operators come with their offsets in the script."""
    assert tokenize("pip install x&&echo ok") == [
        Token(False, "pip", 0, 3),
        Token(False, "install", 4, 11),
        Token(False, "x", 12, 13),
        Token(True, "&&", 13, 15),
        Token(False, "echo", 15, 19),
        Token(False, "ok", 20, 22),
    ]


@pytest.mark.parametrize(
    ("script", "words"),
    [
        ("echo \"a && b\" 'c;d|e'", [["echo", '"a && b"', "'c;d|e'"]]),
        ("v=$(cd /a && pwd) x", [["v=$(cd /a && pwd)", "x"]]),
        ("echo `a;b` ${X:-a b}", [["echo", "`a;b`", "${X:-a b}"]]),
        ("pip install x # a comment && more", [["pip", "install", "x"]]),
        ("echo a#b", [["echo", "a#b"]]),
        ("pip install \\\n    x==1 \\\n    y", [["pip", "install", "x==1", "y"]]),
        ("a\\ b c", [["a\\ b", "c"]]),
        ("", []),
        ("# only a comment", []),
    ],
)
def test_words_keep_their_quotes(script: str, words: list[list[str]]) -> None:
    """Quotes, substitutions and escapes stay inside one word; comments and continuations go."""
    assert [[t.text for t in c.words] for c in simple_commands(tokenize(script))] == words


def test_separators() -> None:
    """Each simple command records the operator that ended it ('' for the last)."""
    script = "a; b || c | d & e\nf && (g)"
    commands = list(simple_commands(tokenize(script)))
    assert [(c.words[0].text, c.separator) for c in commands] == [
        ("a", ";"),
        ("b", "||"),
        ("c", "|"),
        ("d", "&"),
        ("e", "\n"),
        ("f", "&&"),
        ("g", ")"),
    ]


def test_redirections() -> None:
    """Redirections are not words; a digit right before one is its file descriptor."""
    script = "pip install x > /log 2>&1 && cat <<EOF"
    first, second = simple_commands(tokenize(script))
    assert [t.text for t in first.words] == ["pip", "install", "x"]
    assert first.redirects == ((">", "/log"), (">&", "1"))
    assert script[first.start : first.end] == "pip install x > /log 2>&1"
    assert second.redirects == (("<<", "EOF"),)
    assert [t.text for t in second.words] == ["cat"]


@pytest.mark.parametrize(
    "text",
    [
        "pip install 'torch>=2' \"numpy<2\"",
        "echo 'a b' \"c d\" e\\ f",
        "echo \"x\\\"y\" 'it'\"'\"'s'",
        'echo "a\\\\b" a\\\\b',
        "uv pip install --index-url=https://i/simple 'x[cuda]==1; python_version>=\"3.10\"'",
        "echo ''",
    ],
)
def test_unquoting_agrees_with_shlex(text: str) -> None:
    """Where POSIX splitting applies, the words are the ones shlex gives."""
    assert split_commands(text) == [shlex.split(text)]


@pytest.mark.parametrize(
    ("word", "expected"),
    [
        ('"\\$HOME"', "$HOME"),  # POSIX: \ escapes $ inside double quotes (shlex keeps the \)
        ('"a\\b"', "a\\b"),  # ... but not b
        ("$HOME", "$HOME"),
        ("${A:-'b c'}", "${A:-'b c'}"),
        ("$(echo 'x')", "$(echo 'x')"),
        ("`echo 'x'`", "`echo 'x'`"),
        ("'$X'\"$Y\"", "$X$Y"),
        ("a\\\nb", "ab"),
    ],
)
def test_unquote(word: str, expected: str) -> None:
    """Quote removal without expansion: variables and substitutions are kept as written."""
    assert unquote(word) == expected


@pytest.mark.parametrize("word", ["'abc", '"abc', "x'y"])
def test_unterminated_quote(word: str) -> None:
    """An unterminated quote is an error quoting the word."""
    with pytest.raises(ValueError, match="unterminated") as info:
        unquote(word)
    assert repr(word) in str(info.value)


def test_split_commands() -> None:
    """A script becomes the unquoted words of each of its simple commands."""
    script = "cd /a && pip install -U 'x>=1' | tee log; ENV=1 make 2>/dev/null"
    assert split_commands(script) == [
        ["cd", "/a"],
        ["pip", "install", "-U", "x>=1"],
        ["tee", "log"],
        ["ENV=1", "make"],
    ]
