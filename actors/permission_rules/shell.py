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
command name that is computed (``$CMD x``, ``r*``, ``{rm,x}``), an assignment
(``PATH=. ls``; a few inert variables aside), a here-document, arithmetic and the
``${…}`` forms bash evaluates as arithmetic (a variable holding ``a[$(rm y)]``
runs ``rm``), ``$'…'`` and ``$"…"`` (dash reads them otherwise), ``for``/``case``
bodies, an unterminated quote. An opaque command is never allowed by a rule (it
asks), while deny rules still see every part that could be read — dash's reading
too, a here-document's body, what a computed name could come to (``$@ rm x``,
``${IFS}rm x``) — so hiding a denied command makes it ask, never run unasked.
"""

from __future__ import annotations

import os
import re

import attrs

MAX_DEPTH = 8  # nested substitutions and sh -c strings followed before the command is called opaque

_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\+?=")
_HEREDOC = re.compile(r"<<(-?)[ \t]*((?:'[^']*'|\"(?:\\.|[^\"\\])*\"|\\.|[^\s;&|<>()'\"\\])+)")
_SEPARATORS = ("&&", "||", ";;", "|&", ";", "|", "&", "\n", "(", ")")
_REDIRECTIONS = ("&>>", "&>", ">>", ">|", "<>", ">&", "<&", "<<<", ">", "<")
_KEYWORDS = frozenset({"if", "then", "else", "elif", "fi", "do", "done", "while", "until", "!", "{", "}", "time"})
# Variables an assignment may set, before a command or alone, and the line still be allowed: any other can change
# what an allowed command runs (PATH=., HOME=., LD_PRELOAD=, GIT_CONFIG_COUNT=..., BASH_ENV=, x='a[$(rm y)]').
_INERT_VARIABLES = re.compile(r"LANG|LANGUAGE|LC_[A-Z]+|TZ|TERM|COLUMNS|LINES|NO_COLOR|FORCE_COLOR|CLICOLOR(_FORCE)?"
                              r"|COLORTERM|TIME_STYLE|PYTHONUNBUFFERED|PYTHONDONTWRITEBYTECODE|RUST_BACKTRACE|CI")
# ${…} forms bash evaluates as arithmetic or expands again, running what a variable's value says:
# x='a[$(rm y)]'; echo ${a[x]} ${PATH:x} ${!x}, and x='$(rm y)'; echo ${x@P}.
_ARITHMETIC_PARAMETER = re.compile(r"^\$\{!|\[|:(?![-=?+])|@[A-Za-z]")
_OPAQUE_KEYWORDS = frozenset({"for", "case", "select", "function", "coproc", "[[", "(("})
_SHELLS = frozenset({"sh", "bash", "dash", "zsh", "ksh", "mksh", "ash", "fish"})
_RUNS_OPTION_C = frozenset({"su", "runuser", "script", "flock"})  # run the value of -c/--command as a shell script
_FIND_EXEC = frozenset({"-exec", "-execdir", "-ok", "-okdir"})
# Commands that run the rest of their words as a command, with the options that take a value.
_WRAPPERS: dict[str, frozenset[str]] = {
    "command": frozenset(), "builtin": frozenset(), "exec": frozenset({"-a"}), "nohup": frozenset(),
    "nice": frozenset({"-n", "--adjustment"}), "setsid": frozenset(), "stdbuf": frozenset({"-i", "-o", "-e"}),
    "sudo": frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-R", "-T", "-U", "-r", "-t"}),
    "doas": frozenset({"-u", "-C"}), "ionice": frozenset({"-c", "-n", "-p", "-P", "-u"}),
    "chrt": frozenset(), "taskset": frozenset(), "unbuffer": frozenset(), "time": frozenset({"-f", "-o"}),
    "xargs": frozenset({"-a", "-d", "-E", "-I", "-L", "-n", "-P", "-s", "--arg-file", "--delimiter",
                        "--max-args", "--max-procs"}),  # -e -i -l --replace --max-lines: a value only attached
    "timeout": frozenset({"-k", "-s", "--kill-after", "--signal"}),
    "env": frozenset({"-u", "--unset", "-C", "--chdir"}), "flock": frozenset({"-w", "-E", "--timeout"}),
    "watch": frozenset({"-n", "-d", "--interval"}),
    "strace": frozenset({"-o", "-e", "-p", "-s", "-u", "-E", "-a", "-b", "-I", "-O", "-P", "-S", "-X"}),
    "ltrace": frozenset({"-o", "-e", "-p", "-s", "-u", "-E", "-a", "-n"}), "busybox": frozenset(),
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
    if "\0" in command:
        reasons.append("a NUL character")
    _read(command, found, reasons, 0)
    return ShellCommands(tuple(dict.fromkeys(found)), reasons[0] if reasons else None)


def _read(command: str, found: list[tuple[str, ...]], reasons: list[str], depth: int, dash: bool = False) -> None:
    if depth > MAX_DEPTH:
        reasons.append(f"commands nested more than {MAX_DEPTH} deep")
        return
    splitter = _Splitter(command, found, reasons, depth, dash)
    try:
        splitter.split()
    except _Opaque as exc:  # what was read before it still counts for deny rules
        reasons.append(str(exc))
    for words in splitter.out:
        if words:
            _add(words, found, reasons, depth)
    if not dash and ("$'" in command or '$"' in command):
        # /bin/sh may be dash, which reads $'…' as "$" and a quoted string (so $'\'' ends elsewhere): what
        # dash would run is read too, for deny rules; the line itself is opaque.
        _read(command, found, reasons, depth, dash=True)


def _add(words: list[_Word], found: list[tuple[str, ...]], reasons: list[str], depth: int) -> None:
    """One simple command's words: leading assignments and keywords dropped, wrappers looked through."""
    if depth > MAX_DEPTH:
        reasons.append(f"commands nested more than {MAX_DEPTH} deep")
        found.append(tuple(w.text for w in words))
        return
    while words and _ASSIGNMENT.match(words[0].text):
        variable = words[0].text.split("=", 1)[0].rstrip("+")
        if not _INERT_VARIABLES.fullmatch(variable):
            reasons.append(f"the assignment to {variable} can change what a command runs")
        words = words[1:]
    while words and words[0].literal and words[0].text in _KEYWORDS:
        timed = words[0].text == "time"
        words = words[1:]
        while timed and words and words[0].text in ("-p", "--"):
            words = words[1:]
    if not words:
        return
    if words[0].literal and words[0].text in _OPAQUE_KEYWORDS:
        reasons.append(f"{words[0].text!r} is not followed into")
        if len(words) > 3 and words[2].literal and words[2].text == "{":  # function f { …; }, coproc NAME { …; }
            _add(words[3:], found, reasons, depth)
        words = words[1:]
        if not words:
            return
    if not words[0].literal:
        reasons.append(f"the command name {words[0].text!r} is computed when it runs")
        # For deny rules, what it could come to: nothing ($@, "$EMPTY" rm x), or split words (${IFS}rm x, {rm,x}).
        rest = next((i for i in range(1, len(words)) if words[i].literal), None)
        if rest is not None:
            _add(words[rest:], found, reasons, depth)
        pieces = [p for p in re.split(r"\$\{?IFS\}?|[{},]", words[0].text) if p]
        if pieces and pieces != [words[0].text]:
            _add([_Word(p) for p in pieces] + words[1:], found, reasons, depth)
    texts = tuple(w.text for w in words)
    found.append(texts)
    name = os.path.basename(texts[0])
    if name in _RUNS_OPTION_C:
        for i, word in enumerate(texts[1:-1], 1):
            if word in ("-c", "--command"):
                _read(texts[i + 1], found, reasons, depth + 1)
    if name == "alias":  # alias x='rm -rf': x runs that from the next line on (dash expands aliases)
        reasons.append("an alias changes what a later command runs")
        for word in texts[1:]:
            if "=" in word:
                _read(word.split("=", 1)[1], found, reasons, depth + 1)
    elif name == "trap" and len(texts) > 1 and not texts[1].startswith("-"):
        _read(texts[1], found, reasons, depth + 1)
    elif name in _SHELLS:
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
    """The script of ``sh -c SCRIPT``: ``-c`` in any cluster of short options (``-ec``, ``-lc``), the script
    the first word after the options (``sh -c -e -- SCRIPT``, ``sh -o errexit -c SCRIPT``)."""
    with_c = False
    i = 1
    while i < len(texts):
        word = texts[i]
        if word == "--":
            i += 1
            break
        if word in ("-o", "+o", "-O", "+O", "--rcfile", "--init-file"):
            i += 2
            continue
        if not word.startswith(("-", "+")) or word in ("-", "+"):
            break  # the script, or with no -c: sh FILE, a script file read by nobody here
        with_c = with_c or (word.startswith("-") and not word.startswith("--") and "c" in word)
        i += 1
    return texts[i] if with_c and i < len(texts) else None


def _wrapped(name: str, words: list[_Word], reasons: list[str]) -> list[_Word]:
    """The command a wrapper runs: its options (and their values) and, for some, one more argument skipped."""
    takes_value = _WRAPPERS[name]
    i = 0
    while i < len(words):
        text = words[i].text
        if text == "--":
            i += 1
            break
        if name == "env" and (_ASSIGNMENT.match(text) or text == "-"):
            i += 1
            continue
        if name == "env" and (text.startswith("-S") or text.startswith("--split-string")):
            reasons.append("env -S splits a string into a command")
            separate = text in ("-S", "--split-string")  # the string is the next word
            split = (words[i + 1].text if i + 1 < len(words) else "") if separate \
                else text.split("=", 1)[1] if text.startswith("--") else text[2:]
            rest = words[i + 2:] if separate else words[i + 1:]
            return [_Word("sh"), _Word("-c"), _Word(" ".join([split, *(w.text for w in rest)]))]
        if not text.startswith("-") or text == "-":
            break
        clustered = not text.startswith("--") and len(text) > 2 and f"-{text[-1]}" in takes_value  # -iu NAME
        i += 2 if text in takes_value or clustered else 1
    if name == "timeout" and i < len(words):
        i += 1  # the duration
    if name in ("taskset", "chrt") and i < len(words):
        i += 1  # the mask or priority
    if name == "flock" and i < len(words):
        i += 1  # the lock file (flock FILE -c SCRIPT is read as su -c is)
    if name == "watch":  # watch runs its words with sh -c
        rest = words[i:]
        return [_Word("sh"), _Word("-c"), _Word(" ".join(w.text for w in rest))] if rest else []
    return words[i:]


class _Splitter:
    """The tokenizer: one pass over the text, a simple command ended at each separator."""

    def __init__(self, text: str, found: list[tuple[str, ...]], reasons: list[str], depth: int,
                 dash: bool = False) -> None:
        self.s = text
        self.i = 0
        self.found = found
        self.reasons = reasons
        self.depth = depth
        self.dash = dash  # read $'…' and $"…" as dash does
        self.nested = 0  # ${…} inside ${…}
        self.out: list[list[_Word]] = []  # the simple commands read so far
        self.heredocs: list[tuple[str, bool, bool]] = []  # delimiter, quoted, <<-: their bodies start at a newline

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
            elif c in "<>" and word.started and not (word.literal and word.text.isdigit()):
                end_word()  # rm>f x: the redirection ends the word before it
            elif (target := self._redirection(word)) is not None:
                end_word()
                skip_next = target
            elif (op := self._separator(word)) is not None:
                end_word()
                words = []
                out.append(words)  # at once: an opaque rest still leaves what was read here
                if s.startswith("((", self.i):
                    self.reasons.append("arithmetic ((…)), which bash evaluates with variables' values")
                self.i += len(op)
                if op == "\n" and self.heredocs:
                    self._heredoc_bodies()
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
        return "," in body or ".." in body or any(q in body for q in "'\"\\$`")  # {a'}',b}: a} and b

    def _redirection(self, word: _Word) -> bool | None:
        """At a redirection (``2>&1``, ``> file``, ``<<<``): step over it and say whether a target word follows
        (the caller skips it); ``None`` when this is no redirection. ``2>`` is one only when the digits are
        the whole word so far."""
        s = self.s
        if s.startswith("<<", self.i) and not s.startswith("<<<", self.i):
            self.reasons.append("a here-document")
            heredoc = _HEREDOC.match(s, self.i)
            if heredoc is None:
                raise _Opaque("a here-document without a delimiter")
            raw = heredoc.group(2)
            delimiter = re.sub(r"\\(.)|['\"]", lambda m: m.group(1) or "", raw)
            self.heredocs.append((delimiter, delimiter != raw, heredoc.group(1) == "-"))
            word.started = False
            word.text = ""
            self.i = heredoc.end()
            return False
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

    def _heredoc_bodies(self) -> None:
        """At the line after ``<<EOF``: step over each body; one whose delimiter is unquoted is expanded, so the
        substitutions in it are read."""
        s = self.s
        for delimiter, quoted, strip_tabs in self.heredocs:
            start = end = self.i
            while self.i < len(s):
                line_end = s.find("\n", self.i)
                line_end = len(s) if line_end < 0 else line_end
                line, end = s[self.i:line_end], self.i
                self.i = min(line_end + 1, len(s))
                if (line.lstrip("\t") if strip_tabs else line) == delimiter:
                    break
                end = self.i
            if not quoted:
                self._expansions(s[start:end])
        self.heredocs = []

    def _expansions(self, text: str) -> None:
        """Read the substitutions in ``text`` as a double-quoted string's (a here-document's body)."""
        sub = _Splitter(text, self.found, self.reasons, self.depth + 1, self.dash)
        scratch = _Word()
        try:
            while sub.i < len(text):
                if text[sub.i] == "\\":
                    sub.i += 2
                elif text[sub.i] == "$":
                    sub._dollar(scratch, quoted=True)
                elif text[sub.i] == "`":
                    sub._backquoted()
                else:
                    sub.i += 1
        except _Opaque as exc:
            self.reasons.append(str(exc))

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
        if s.startswith("$((", self.i) or nxt == "[":
            # read as $( (…) ) would be, for the commands in it (bash also takes $((a);(b)) as one)
            self.reasons.append("arithmetic expansion, which bash evaluates with variables' values")
        if nxt == "(":
            word.literal = False
            self.i += 1
            word.text += "$" + self._substitution()
        elif nxt == "'" and not quoted and not self.dash:
            self.reasons.append("$'…', which bash and dash read differently")
            self.i += 2
            word.text += self._ansi_c()
        elif nxt == '"' and not quoted and not self.dash:
            self.reasons.append('$"…", which bash and dash read differently')
            self.i += 1  # bash: a double-quoted string
        elif nxt == "{":
            word.literal = False
            word.text += self._parameter()
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

    def _parameter(self) -> str:
        """At ``${``: step over it to its ``}``, reading the commands in it; returns its text."""
        s = self.s
        start = self.i
        self.i += 2
        inner = _Word()
        self.nested += 1
        if self.nested > 4 * MAX_DEPTH:
            raise _Opaque("${…} nested too deep")
        while True:
            if self.i >= len(s):
                raise _Opaque("an unterminated ${")
            c = s[self.i]
            if c == "}":
                self.i += 1
                break
            if c in "'\"\\`" or s.startswith("$(", self.i):  # where ${ ends then depends on the shell and quoting
                self.reasons.append("quotes, escapes or a command inside ${…}")
            if c == "'":
                end = s.find("'", self.i + 1)
                if end < 0:
                    raise _Opaque("an unterminated single quote")
                self.i = end + 1
            elif c == '"':
                self._double_quoted(inner)
            elif c == "\\":
                self.i += 2
            elif c == "$":
                self._dollar(inner, quoted=True)
            elif c == "`":
                self._backquoted()
            else:
                self.i += 1
        self.nested -= 1
        text = s[start:self.i]
        if _ARITHMETIC_PARAMETER.search(text):
            self.reasons.append(f"{text}, which bash evaluates with variables' values")
        return text

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
