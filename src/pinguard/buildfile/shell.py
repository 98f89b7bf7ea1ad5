"""Shell words: splitting a POSIX ``sh`` script into simple commands and their words.

Owns the one tokenizer every reader of shell text uses (the Dockerfile lint, the resolver's
replay of history steps, the guard's step names): operators (``&&``, ``||``, ``;``, pipes,
``&``, newlines, subshell parentheses, redirections), words that keep their quotes, ``$(...)``,
``${...}`` and backquotes whole, ``\\``-newline continuations and ``#`` comments; grouping the
tokens into `SimpleCommand` values (words, redirections, the separator that ended each); and
POSIX quote removal (`unquote`) for readers that do not expand variables. Expansion with known
values (ARG and ENV) is the Dockerfile's business (`pinguard.buildfile.dockerfile.expand_word`).
Token offsets index the original text, so a caller can map a command back to its lines.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass

#: Programs that run a shell script (``sh -c SCRIPT``, ``bash <<EOF``).
SHELLS = frozenset({"sh", "bash", "dash", "ash", "zsh", "ksh", "busybox"})
#: Longest first, so ``&&`` is read before ``&``.
OPERATORS = (
    "&&",
    "||",
    ";;",
    "|&",
    "<<-",
    "<<<",
    "<<",
    ">>",
    ">&",
    "<&",
    ">|",
    "&>",
    "<>",
    "&",
    "|",
    ";",
    "(",
    ")",
    "<",
    ">",
    "\n",
)
#: Operators that end a simple command; the others are redirections.
SEPARATORS = frozenset({"&&", "||", ";;", "|&", "&", "|", ";", "(", ")", "\n"})
#: Separators that end a list item as ``&&`` does (what runs after it is another step).
LIST_SEPARATORS = frozenset({"&&", ";", "\n"})
_META = " \t\n;&|()<>"
_DOUBLE_ESCAPES = '$`"\\\n'


@dataclass(frozen=True, slots=True)
class Token:
    """An operator or a word as written (quotes kept), with its offsets in the script."""

    op: bool
    text: str
    start: int
    end: int


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    """The words and redirections of one simple command and the operator that ended it."""

    words: tuple[Token, ...]
    redirects: tuple[tuple[str, str], ...]  # (operator, target word as written)
    separator: str  # "" at the end of the script
    start: int  # offset of the first token (word or redirection)
    end: int  # offset just after the last token

    def argv(self) -> list[str]:
        """The words with quotes removed (`unquote`); ``ValueError`` on an unterminated one."""
        return [unquote(t.text) for t in self.words]


def _substitution_end(s: str, i: int) -> int:
    """The end of the backquoted, ``$(...)`` or ``${...}`` text starting at ``i``."""
    n = len(s)
    if s[i] == "`":
        end = s.find("`", i + 1)
        return n if end < 0 else end + 1
    opening = s[i + 1]
    close = ")" if opening == "(" else "}"
    depth, j = 1, i + 2
    while j < n and depth:
        if s[j] == close:
            depth -= 1
        elif s[j] == opening:
            depth += 1
        j += 1
    return j


def _is_substitution(s: str, i: int) -> bool:
    return s[i] == "`" or (s[i] == "$" and i + 1 < len(s) and s[i + 1] in "({")


def _read_word(s: str, i: int) -> int:
    """The end of the shell word starting at ``i`` (quotes and substitutions kept whole)."""
    n = len(s)
    while i < n:
        ch = s[i]
        if ch in _META:
            return i
        if ch == "\\":
            i += 2
        elif ch == "'":
            end = s.find("'", i + 1)
            i = n if end < 0 else end + 1
        elif ch == '"':
            i += 1
            while i < n and s[i] != '"':
                i += 2 if s[i] == "\\" else 1
            i += 1
        elif _is_substitution(s, i):
            i = _substitution_end(s, i)
        else:
            i += 1
    return min(i, n)


def tokenize(script: str) -> list[Token]:
    """Operators and words of ``script``; comments and line continuations are dropped."""
    tokens: list[Token] = []
    i, n = 0, len(script)
    while i < n:
        ch = script[i]
        if ch in " \t\r":
            i += 1
            continue
        if script.startswith("\\\n", i):
            i += 2
            continue
        if ch == "#" and (i == 0 or script[i - 1] in _META):
            while i < n and script[i] != "\n":
                i += 1
            continue
        op = next((o for o in OPERATORS if script.startswith(o, i)), None)
        if op is not None:
            tokens.append(Token(True, op, i, i + len(op)))
            i += len(op)
            continue
        end = _read_word(script, i)
        tokens.append(Token(False, script[i:end], i, end))
        i = end
    return tokens


def simple_commands(tokens: Sequence[Token]) -> Iterator[SimpleCommand]:
    """Group ``tokens`` into simple commands; empty ones (``;;``, a leading ``(``) are skipped.

    A redirection takes the word after it as its target; a digit word written right before
    it is its file descriptor (the ``2`` of ``2>&1``), not an argument.
    """
    words: list[Token] = []
    redirects: list[tuple[str, str]] = []
    start: int | None = None
    end = 0
    k = 0
    while k < len(tokens):
        tok = tokens[k]
        if tok.op and tok.text in SEPARATORS:
            if words or redirects:
                yield SimpleCommand(tuple(words), tuple(redirects), tok.text, start or 0, end)
            words, redirects, start = [], [], None
            k += 1
            continue
        start = tok.start if start is None else start
        end = tok.end
        if tok.op:
            if words and words[-1].text.isdigit() and words[-1].end == tok.start:
                words.pop()  # the fd of "2>&1"
            target = ""
            if k + 1 < len(tokens) and not tokens[k + 1].op:
                target = tokens[k + 1].text
                end = tokens[k + 1].end
                k += 1
            redirects.append((tok.text, target))
        else:
            words.append(tok)
        k += 1
    if words or redirects:
        yield SimpleCommand(tuple(words), tuple(redirects), "", start or 0, end)


def unquote(word: str) -> str:
    """POSIX quote removal without expansion: ``'a b'`` -> ``a b``, ``\\$X`` -> ``$X``.

    ``$NAME``, ``${...}``, ``$(...)`` and backquotes are kept as written. An unterminated
    quote raises ``ValueError`` quoting the word.
    """
    out: list[str] = []
    i, n = 0, len(word)
    while i < n:
        ch = word[i]
        if ch == "\\":
            if i + 1 < n and word[i + 1] != "\n":
                out.append(word[i + 1])
            i += 2
        elif ch == "'":
            end = word.find("'", i + 1)
            if end < 0:
                raise ValueError(f"unterminated single quote in {word!r}")
            out.append(word[i + 1 : end])
            i = end + 1
        elif ch == '"':
            i += 1
            while i < n and word[i] != '"':
                if word[i] == "\\" and i + 1 < n and word[i + 1] in _DOUBLE_ESCAPES:
                    if word[i + 1] != "\n":
                        out.append(word[i + 1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            if i >= n:
                raise ValueError(f"unterminated double quote in {word!r}")
            i += 1
        elif _is_substitution(word, i):
            end = _substitution_end(word, i)  # kept whole, as written
            out.append(word[i:end])
            i = end
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def split_commands(script: str) -> list[list[str]]:
    """The words of each simple command of ``script``, quotes removed, nothing expanded.

    Raises ``ValueError`` when a word has an unterminated quote.
    """
    return [command.argv() for command in simple_commands(tokenize(script)) if command.words]
