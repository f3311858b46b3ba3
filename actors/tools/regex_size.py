"""How large a regular expression compiles to, read from its text before ``regex`` compiles it.

``regex`` unrolls each repeat's minimum count when it compiles (``a{1000}`` is a
thousand elements) and holds the GIL meanwhile, so ``(a{1000}){1000}`` would
freeze the daemon before any time budget could stop a match. :func:`repeat_size`
reads the pattern once, left to right, and adds up what compiling would build:
1 for each literal, escape, class or anchor; a group, the sum of its branches;
an item followed by a quantifier, times its minimum count plus one (the
unrolled copies and the repeat itself: ``+`` is 2, ``*`` and ``?`` are 1).

It is an estimate that errs large: the header of a group (``(?P<name>``) and
the digits after an escape (``\\x41``) count as literals, and syntax is not
checked (``regex.compile`` does that next, and says what is wrong). Nesting is
tracked on a list, not by recursion, so a pattern nested 100,000 deep is
measured and refused rather than crashing the reader.
"""

from __future__ import annotations

import re

MAX_DEPTH = 200  # groups open at once; deeper is refused (regex's own compile recurses per level)
_QUANTIFIER = re.compile(r"\{(\d*)(?:,(\d*))?\}")


class NestedTooDeeply(ValueError):
    pass


def _class_end(pattern: str, start: int) -> int:
    """The index after the ``]`` closing the class that opens at ``start`` (the end of the text if none)."""
    i = start + 1
    if pattern.startswith("^", i):
        i += 1
    if pattern.startswith("]", i):  # a ] first in a class is a literal
        i += 1
    while i < len(pattern):
        if pattern[i] == "\\":
            i += 2
            continue
        if pattern[i] == "]":
            return i + 1
        i += 1
    return len(pattern)


def repeat_size(pattern: str) -> int:
    """About how many elements ``regex`` builds for ``pattern`` (see the module); :class:`NestedTooDeeply`
    past :data:`MAX_DEPTH` open groups."""
    groups: list[list[int]] = [[0, 0]]  # per open group: [its finished branches, its current branch]
    last = 0  # the size of the item a quantifier would apply to
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        minimum = -1
        if c == "\\":
            last, i = 1, i + 2
        elif c == "[":
            last, i = 1, _class_end(pattern, i)
        elif c == "(":
            if len(groups) > MAX_DEPTH:
                raise NestedTooDeeply(f"more than {MAX_DEPTH} groups open at once")
            groups.append([0, 0])
            last, i = 0, i + 1
            continue
        elif c == ")" and len(groups) > 1:
            done, current = groups.pop()
            last, i = done + current, i + 1
        elif c == "|":
            groups[-1][0] += groups[-1][1]
            groups[-1][1] = last = 0
            i += 1
            continue
        elif c in "*?+":
            minimum, i = (1 if c == "+" else 0), i + 1
        elif c == "{" and (match := _QUANTIFIER.match(pattern, i)) and (match[1] or match[2]):
            minimum, i = int(match[1] or 0), match.end()
        else:
            last, i = 1, i + 1
        if minimum >= 0:
            if i < n and pattern[i] in "?+":  # lazy or possessive: the same repeat
                i += 1
            groups[-1][1] += last * minimum  # the item once more per required copy: last * (minimum + 1)
            last *= minimum + 1
            continue
        groups[-1][1] += last
    total = 0
    for done, current in groups:
        total += done + current
    return total
