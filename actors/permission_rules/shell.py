"""A shell command as permission rules see it: every simple command it would run. Pure; no I/O.

:func:`simple_commands` reads a command line the way ``sh`` would split it and
returns each simple command's literal words — assignments and redirections
left out, quotes and escapes removed — for the command itself and for every
command hidden inside it::

    echo hi && rm -rf x            -> (echo hi) (rm -rf x)
    a | b; c & d || (e)            -> (a) (b) (c) (d) (e)
    echo $(rm x) `rm y` <(rm z)    -> (echo …) (rm x) (rm y) (rm z)
    FOO=1 'r''m' x                 -> (rm x)
    sh -c 'rm x'  / eval rm x      -> (sh -c 'rm x') (rm x)   / (eval rm x) (rm x)
    env -i nice -n 5 rm x          -> (env -i nice -n 5 rm x) (nice -n 5 rm x) (rm x)
    find . -exec rm {} ;           -> (find …) (rm {})

What cannot be read literally makes the result **opaque**, with the reason: a
command name that is computed (``$CMD x``, ``r*``, ``{rm,x}``), a here-document,
arithmetic, ``for``/``case`` bodies, an unterminated quote. An opaque command is
never allowed by a rule (it asks), while deny rules still see every part that
could be read — so hiding a denied command makes it ask, never run unasked.
"""

from __future__ import annotations

import os
import re

import attrs

MAX_DEPTH = 8  # nested substitutions and sh -c strings followed before the command is called opaque

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_SEPARATORS = ("&&", "||", ";;", "|&", ";", "|", "&", "\n", "(", ")")
_REDIRECTIONS = ("&>>", "&>", ">>", ">|", "<>", ">&", "<&", "<<<", ">", "<")
_KEYWORDS = frozenset({"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}", "time"})
_OPAQUE_KEYWORDS = frozenset({"for", "case", "select", "function", "coproc", "[[", "(("})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish"})
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
# Commands that run the rest of their words as a command, with the options that take a value.
_WRAPPERS: dict[str, frozenset[str]] = {
    "command": frozenset(), "builtin": frozenset(), "exec": frozenset({"-a"}), "nohup": frozenset(),
    "nice": frozenset({"-n", "--adjustment"}), "setsid": frozenset(), "stdbuf": frozenset({"-i", "-o", "-e"}),
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-R", "-T", "-U", "-r", "-t"}),
    "doas": frozenset({"-u", "-C"}), "ionice": frozenset({"-c", "-n", "-p", "-P", "-u"}),
    "chrt": frozenset(), "taskset": frozenset(), "unbuffer": frozenset(), "time": frozenset({"-f", "-o"}),
    "xargs": frozenset({"-a", "-d", "-E", "-e", "-I", "-i", "-L", "-l", "-n", "-P", "-s", "--arg-file",
                        "--delimiter", "--max-args", "--max-procs", "--max-lines", "--replace"}),
    "timeout": frozenset({"-k", "-s", "--kill-after", "--signal"}),
    "env": frozenset({"-u", "--unset", "-C", "--chdir"}), "flock": frozenset({"-w", "-E", "--timeout"}),
    "watch": frozenset({"-n", "-d", "--interval"}),
}


@attrs.frozen
class ShellCommands:
    """What :func:`simple_commands` found: the simple commands, and why it is opaque (``None``: it is not)."""

    commands: tuple[tuple[str, ...], ...]
    opaque: str | None = None


class _Opaque(Exception):
    pass


@attrs.define
class _Word:
    text: str = ""
    literal: bool = True  # no expansion, glob or brace in it: the text is what runs
    started: bool = False


def simple_commands(command: str) -> ShellCommands:
    """Every simple command ``command`` runs, and whether it could be read in full (see the module)."""
    found: list[tuple[str, ...]] = []
    reasons: list[str] = []
    _read(command, found, reasons, 0)
    return ShellCommands(tuple(dict.fromkeys(found)), reasons[0] if reasons else None)


def _read(command: str, found: list[tuple[str, ...]], reasons: list[str], depth: int) -> None:
    if depth > MAX_DEPTH:
        reasons.append(f"commands nested more than {MAX_DEPTH} deep")
        return
    splitter = _Splitter(command, found, reasons, depth)
    try:
        splitter.split()
    except _Opaque as exc:  # what was read before it still counts for deny rules
        reasons.append(str(exc))
    for words in splitter.out:
        if words:
            _add(words, found, reasons, depth)


def _add(words: list[_Word], found: list[tuple[str, ...]], reasons: list[str], depth: int) -> None:
    """One simple command's words: leading assignments and keywords dropped, wrappers looked through."""
    while words and (words[0].literal and _ASSIGNMENT.match(words[0].text)):
        words = words[1:]
    while words and words[0].literal and words[0].text in _KEYWORDS:
        words = words[1:]
    if not words:
        return
    if words[0].literal and words[0].text in _OPAQUE_KEYWORDS:
        reasons.append(f"{words[0].text!r} is not followed into")
        words = words[1:]
        if not words:
            return
    if not words[0].literal:
        reasons.append(f"the command name {words[0].text!r} is computed when it runs")
    texts = tuple(w.text for w in words)
    found.append(texts)
    name = os.path.basename(texts[0])
    if name in _SHELLS:
        script = _shell_script(texts)
        if script is not None:
            _read(script, found, reasons, depth + 1)
    elif name == "eval":
        _read(" ".join(texts[1:]), found, reasons, depth + 1)
    elif name in ("find", "fd"):
        for i, word in enumerate(texts):
            if word in _FIND_EXEC:
                end = next((j for j in range(i + 1, len(texts)) if texts[j] in (";", "+")), len(texts))
                if end > i + 1:
                    _add([_Word(t, True, True) for t in texts[i + 1:end]], found, reasons, depth + 1)
    elif name in _WRAPPERS:
        rest = _wrapped(name, words[1:], reasons)
        if rest:
            _add(rest, found, reasons, depth + 1)


def _shell_script(texts: tuple[str, ...]) -> str | None:
    """The script of ``sh -c SCRIPT`` (``-c`` in any cluster of short options: ``-ec``, ``-lc``)."""
    for i, word in enumerate(texts[1:], 1):
        if word.startswith("-") and not word.startswith("--") and "c" in word:
            return texts[i + 1] if i + 1 < len(texts) else None
        if not word.startswith("-") and not word.startswith("+"):
            return None  # sh FILE: a script file, read by nobody here
    return None


def _wrapped(name: str, words: list[_Word], reasons: list[str]) -> list[_Word]:
    """The command a wrapper runs: its options (and their values) and, for some, one more argument skipped."""
    takes_value = _WRAPPERS[name]
    i = 0
    while i < len(words):
        text = words[i].text
        if text == "--":
            i += 1
            break
        if name == "env" and words[i].literal and _ASSIGNMENT.match(text):
            i += 1
            continue
        if name == "env" and text in ("-S", "--split-string") or text.startswith("--split-string="):
            reasons.append("env -S splits a string into a command")
            return []
        if not text.startswith("-") or text == "-":
            break
        i += 2 if text in takes_value else 1
    if name == "timeout" and i < len(words):
        i += 1  # the duration
    if name in ("taskset", "chrt") and i < len(words):
        i += 1  # the mask or priority
    if name == "flock" and i < len(words):
        i += 1  # the lock file
        if i < len(words) and words[i].text in ("-c", "--command"):
            return [_Word("sh", True, True), _Word("-c", True, True), *words[i + 1:i + 2]]
    if name == "watch":
        rest = words[i:]
        return [_Word(" ".join(w.text for w in rest), all(w.literal for w in rest), True)] if rest else []
    return words[i:]


class _Splitter:
    """The tokenizer: one pass over the text, a simple command ended at each separator."""

    def __init__(self, text: str, found: list[tuple[str, ...]], reasons: list[str], depth: int) -> None:
        self.s = text
        self.i = 0
        self.found = found
        self.reasons = reasons
        self.depth = depth
        self.out: list[list[_Word]] = []  # the simple commands read so far

    def split(self) -> None:
        out = self.out
        words: list[_Word] = []
        out.append(words)
        word = _Word()
        skip_next = False  # the next word is a redirection's target, not an argument

        def end_word() -> None:
            nonlocal word, skip_next
            if word.started:
                if not skip_next:
                    words.append(word)
                skip_next = False
            word = _Word()

        s = self.s
        while self.i < len(s):
            c = s[self.i]
            if c in " \t":
                end_word()
                self.i += 1
            elif c == "#" and not word.started:
                while self.i < len(s) and s[self.i] != "\n":
                    self.i += 1
            elif c == "\\":
                if s.startswith("\\\n", self.i):
                    self.i += 2  # a line continuation
                    continue
                word.started = True
                word.text += s[self.i + 1:self.i + 2]
                self.i += 2
            elif c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise _Opaque("an unterminated single quote")
                word.started = True
                word.text += s[self.i + 1:end]
                self.i = end + 1
            elif c == '"':
                self._double_quoted(word)
            elif c == "$":
                self._dollar(word)
            elif c == "`":
                word.started = True
                word.literal = False
                word.text += self._backquoted()
            elif (c in "<>") and s.startswith("(", self.i + 1):
                word.started = True
                word.literal = False
                self.i += 1
                word.text += self._substitution()
            elif (target := self._redirection(word)) is not None:
                end_word()
                skip_next = target
            elif (op := self._separator(word)) is not None:
                end_word()
                words = []
                out.append(words)  # at once: an opaque rest still leaves what was read here
                self.i += len(op)
            else:
                if c in "*?[" or (c == "{" and self._brace_expansion()):
                    word.literal = False
                word.started = True
                word.text += c
                self.i += 1
        end_word()

    def _separator(self, word: _Word) -> str | None:
        """The control operator here, if any (``(`` only where a word could start: a subshell)."""
        if word.started and self.s[self.i] == "(":
            return None
        return next((o for o in _SEPARATORS if self.s.startswith(o, self.i)), None)

    def _brace_expansion(self) -> bool:
        end = self.s.find("}", self.i)
        body = self.s[self.i + 1:end] if end > 0 else ""
        return "," in body or ".." in body

    def _redirection(self, word: _Word) -> bool | None:
        """At a redirection (``2>&1``, ``> file``, ``<<<``): step over it and say whether a target word follows
        (the caller skips it); ``None`` when this is no redirection. ``2>`` is one only when the digits are
        the whole word so far."""
        s = self.s
        if s.startswith("<<", self.i) and not s.startswith("<<<", self.i):
            raise _Opaque("a here-document")
        op = next((o for o in _REDIRECTIONS if s.startswith(o, self.i)), None)
        if op is None:
            return None
        if word.started and not (word.literal and word.text.isdigit()):
            return None
        word.started = False  # the fd number is not an argument
        word.text = ""
        self.i += len(op)
        if op in (">&", "<&") and self.i < len(s) and (s[self.i].isdigit() or s[self.i] == "-"):
            while self.i < len(s) and (s[self.i].isdigit() or s[self.i] == "-"):
                self.i += 1
            return False  # 2>&1, >&-: a descriptor, no file
        return True

    def _double_quoted(self, word: _Word) -> None:
        s = self.s
        word.started = True
        self.i += 1
        while True:
            if self.i >= len(s):
                raise _Opaque("an unterminated double quote")
            c = s[self.i]
            if c == '"':
                self.i += 1
                return
            if c == "\\" and self.i + 1 < len(s) and s[self.i + 1] in '$`"\\\n':
                if s[self.i + 1] != "\n":
                    word.text += s[self.i + 1]
                self.i += 2
            elif c == "$":
                self._dollar(word, quoted=True)
            elif c == "`":
                word.literal = False
                word.text += self._backquoted()
            else:
                word.text += c
                self.i += 1

    def _dollar(self, word: _Word, *, quoted: bool = False) -> None:
        s = self.s
        word.started = True
        nxt = s[self.i + 1:self.i + 2]
        if s.startswith("$((", self.i):
            raise _Opaque("arithmetic expansion")
        if nxt == "(":
            word.literal = False
            self.i += 1
            word.text += "$" + self._substitution()
        elif nxt == "'" and not quoted:
            self.i += 2
            word.text += self._ansi_c()
        elif nxt == "{":
            end = s.find("}", self.i)
            if end < 0:
                raise _Opaque("an unterminated ${")
            if "$(" in s[self.i:end] or "`" in s[self.i:end]:
                raise _Opaque("a command inside a parameter expansion")
            word.literal = False
            word.text += s[self.i:end + 1]
            self.i = end + 1
        elif nxt and (nxt.isalnum() or nxt in "_@*#?$!-"):
            word.literal = False
            j = self.i + 1
            if nxt.isalpha() or nxt == "_":
                while j < len(s) and (s[j].isalnum() or s[j] == "_"):
                    j += 1
            else:
                j += 1
            word.text += s[self.i:j]
            self.i = j
        else:
            word.text += "$"
            self.i += 1

    def _substitution(self) -> str:
        """At the ``(`` of ``$(…)``, ``<(…)`` or ``>(…)``: the commands inside are read too; returns its text."""
        s = self.s
        start = self.i + 1
        depth = 1
        j = start
        while j < len(s):
            c = s[j]
            if c == "\\":
                j += 2
                continue
            if c == "'":
                k = s.find("'", j + 1)
                if k < 0:
                    raise _Opaque("an unterminated single quote")
                j = k + 1
                continue
            if c == '"':
                k = j + 1
                while k < len(s) and s[k] != '"':
                    k += 2 if s[k] == "\\" else 1
                if k >= len(s):
                    raise _Opaque("an unterminated double quote")
                j = k + 1
                continue
            if c == "(":
                depth += 1
            elif c == ")":
                depth -= 1
                if depth == 0:
                    inner = s[start:j]
                    self.i = j + 1
                    _read(inner, self.found, self.reasons, self.depth + 1)
                    return f"({inner})"
            j += 1
        raise _Opaque("an unterminated $(")

    def _backquoted(self) -> str:
        s = self.s
        j = self.i + 1
        inner = ""
        while j < len(s) and s[j] != "`":
            if s[j] == "\\" and j + 1 < len(s) and s[j + 1] in "`\\$":
                inner += s[j + 1]
                j += 2
            else:
                inner += s[j]
                j += 1
        if j >= len(s):
            raise _Opaque("an unterminated backquote")
        self.i = j + 1
        _read(inner, self.found, self.reasons, self.depth + 1)
        return f"`{inner}`"

    def _ansi_c(self) -> str:
        """The text of ``$'…'`` (at its first character), its escapes decoded as bash does."""
        s = self.s
        out = ""
        while self.i < len(s) and s[self.i] != "'":
            c = s[self.i]
            if c != "\\" or self.i + 1 >= len(s):
                out += c
                self.i += 1
                continue
            e = s[self.i + 1]
            self.i += 2
            simple = {"n": "\n", "t": "\t", "r": "\r", "a": "\a", "b": "\b", "f": "\f", "v": "\v",
                      "e": "\x1b", "E": "\x1b", "\\": "\\", "'": "'", '"': '"', "?": "?"}
            if e in simple:
                out += simple[e]
            elif e in "xuU":
                width = {"x": 2, "u": 4, "U": 8}[e]
                digits = re.match(r"[0-9a-fA-F]{1,%d}" % width, s[self.i:])
                if digits is None:
                    out += "\\" + e
                    continue
                out += chr(int(digits.group(), 16))
                self.i += len(digits.group())
            elif e in "01234567":
                digits = re.match(r"[0-7]{0,2}", s[self.i:])
                assert digits is not None
                out += chr(int(e + digits.group(), 8) & 0xFF)
                self.i += len(digits.group())
            elif e == "c":
                raise _Opaque("a control character escape in $'…'")
            else:
                out += "\\" + e
        if self.i >= len(s):
            raise _Opaque("an unterminated $'")
        self.i += 1
        return out


__all__ = ["MAX_DEPTH", "ShellCommands", "simple_commands"]
