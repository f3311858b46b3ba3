"""glob and grep (actors/tools/search.py, walk.py) on real trees: .gitignore, bounds, refusals, and hostile
patterns bounded in time and size."""

from __future__ import annotations

import os
import re
import time
from pathlib import Path
from typing import Any

import pytest
import regex
import trio

from actors.tools import GlobTool, GrepTool
from actors.tools.paths import Scope
from actors.tools.search import MAX_FILES, MAX_MATCHES, MAX_REGEX_SIZE
from actors.tools.walk import Abandoned, Budget, Matcher, TooSlow, Walk
from tests.actors.tools.harness import Services, call, fifo_valve, runtime


def tree(root: Path, files: dict[str, str | bytes]) -> None:
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(text, bytes):
            path.write_bytes(text)
        else:
            path.write_text(text)


def paths(result) -> list[str]:
    """The paths (or match lines) of a result, without its notes."""
    return [line for line in result.content.split("\n")
            if line and not line.startswith(("[", "No files match", "No matches"))]


# ----------------------------------------------------------------- glob


async def test_glob_matches_sorted_paths_relative_to_the_cwd(tmp_path):
    tree(tmp_path, {"b.py": "", "a.py": "", "src/z.py": "", "src/deep/er/y.py": "", "src/notes.md": "",
                    ".venv/lib/site.py": "", ".hidden.py": ""})
    result = await call(GlobTool, tmp_path, {"pattern": "**/*.py"})
    assert result.error is None
    # As in a shell, wildcards do not match a leading dot.
    assert paths(result) == ["a.py", "b.py", "src/deep/er/y.py", "src/z.py"]
    assert paths(await call(GlobTool, tmp_path, {"pattern": "*.py"})) == ["a.py", "b.py"]
    assert paths(await call(GlobTool, tmp_path, {"pattern": "*.py", "path": "src"})) == ["src/z.py"]
    assert paths(await call(GlobTool, tmp_path, {"pattern": "src/**/*.{py,md}"})) == \
        ["src/deep/er/y.py", "src/notes.md", "src/z.py"]
    assert paths(await call(GlobTool, tmp_path, {"pattern": ".venv/**"})) == [".venv/lib/site.py"]
    assert result.locations == ({"path": str(tmp_path)},)


async def test_glob_respects_gitignore_files_nested_negated_and_above_the_path(tmp_path):
    tree(tmp_path, {
        ".git/HEAD": "ref: refs/heads/main\n",
        ".git/info/exclude": "secret.txt\n",
        ".gitignore": "build/\n*.log\n!keep.log\n",
        "build/out.txt": "", "app.log": "", "keep.log": "", "secret.txt": "", "src/a.txt": "",
        "src/.gitignore": "generated/\n!important.log\n", "src/generated/g.txt": "", "src/important.log": "",
        "src/other.log": "",
    })
    result = await call(GlobTool, tmp_path, {"pattern": "**/*"})
    assert paths(result) == ["keep.log", "src/a.txt", "src/important.log"]
    # From a subdirectory, the parents' rules still apply (up to the repository's top).
    assert paths(await call(GlobTool, tmp_path, {"pattern": "*", "path": "src"})) == \
        ["src/a.txt", "src/important.log"]


async def test_glob_never_lists_git_nor_follows_symlinked_directories(tmp_path):
    tree(tmp_path / "work", {".git/config": "", "a.txt": ""})
    tree(tmp_path / "elsewhere", {"b.txt": ""})
    os.symlink(tmp_path / "elsewhere", tmp_path / "work" / "linked")
    result = await call(GlobTool, tmp_path / "work", {"pattern": "**/*"})
    assert paths(result) == ["a.txt"]
    assert paths(await call(GlobTool, tmp_path / "work", {"pattern": ".git/*"})) == []


async def test_glob_is_bounded_and_says_how_many_more_matched(tmp_path):
    tree(tmp_path, {f"f{i:03}.txt": "" for i in range(MAX_FILES + 5)})
    result = await call(GlobTool, tmp_path, {"pattern": "*.txt"})
    assert len(paths(result)) == MAX_FILES and paths(result)[0] == "f000.txt"
    assert result.content.endswith("[5 more files match, not shown; narrow the pattern or path]")


async def test_a_walk_stops_at_its_entry_limit_and_says_so(tmp_path):
    tree(tmp_path, {f"d{i}/f.txt": "" for i in range(10)})
    walk = Walk(str(tmp_path), Scope(str(tmp_path)), limit=5)
    found = list(walk.files())
    assert walk.stopped and 0 < len(found) < 10


async def test_glob_refusals(tmp_path):
    assert "must be a relative pattern" in (await call(GlobTool, tmp_path, {"pattern": "/etc/*"})).error
    assert "must be a relative pattern" in (await call(GlobTool, tmp_path, {"pattern": "../*"})).error
    assert "lies outside" in (await call(GlobTool, tmp_path, {"pattern": "*", "path": "/"})).error
    (tmp_path / "f").write_text("")
    assert (await call(GlobTool, tmp_path, {"pattern": "*", "path": "f"})).error == "f is not a directory"
    result = await call(GlobTool, tmp_path, {"pattern": "*.rs"})
    assert result.error is None and result.content == "No files match '*.rs' under .."


async def test_the_state_directory_is_never_listed(tmp_path):
    tree(tmp_path, {".trellis/token": "s3cret", ".trellis/sessions/x.jsonl": "s3cret", "a.txt": "s3cret"})
    services = Services(runtime=runtime(tmp_path / ".trellis"))
    assert paths(await call(GlobTool, tmp_path, {"pattern": ".trellis/**"}, services)) == []
    grep = await call(GrepTool, tmp_path, {"pattern": "s3cret"}, services)
    assert paths(grep) == ["a.txt:1:s3cret"]


# ----------------------------------------------------------------- grep


async def test_grep_gives_path_line_text_with_the_locations(tmp_path):
    tree(tmp_path, {"a.py": "import os\ndef main():\n    os.exit(0)\n", "b/c.py": "x = 1\nos = None\n",
                    "notes.txt": "os here too\n"})
    result = await call(GrepTool, tmp_path, {"pattern": r"\bos\b"})
    assert paths(result) == ["a.py:1:import os", "a.py:3:    os.exit(0)", "b/c.py:2:os = None",
                             "notes.txt:1:os here too"]
    assert result.locations[0] == {"path": str(tmp_path / "a.py"), "line": 1}
    assert len(result.locations) == 4
    assert paths(await call(GrepTool, tmp_path, {"pattern": "OS", "case_insensitive": True, "glob": "*.txt"})) == \
        ["notes.txt:1:os here too"]
    # A glob with a slash is matched against the path under `path`.
    assert paths(await call(GrepTool, tmp_path, {"pattern": "os", "glob": "b/*.py"})) == ["b/c.py:2:os = None"]
    # One file.
    assert paths(await call(GrepTool, tmp_path, {"pattern": "x", "path": "b/c.py"})) == ["b/c.py:1:x = 1"]


async def test_grep_respects_gitignore_and_skips_binary_files_saying_so(tmp_path):
    tree(tmp_path, {".gitignore": "dist/\n", "dist/bundle.js": "needle\n", "src/a.js": "needle\n",
                    "logo.png": b"\x89PNG\x00\x00needle", "latin.txt": "caf\xe9 needle\n".encode("latin-1")})
    result = await call(GrepTool, tmp_path, {"pattern": "needle"})
    assert paths(result) == ["latin.txt:1:caf\ufffd needle", "src/a.js:1:needle"]
    assert "[skipped 1 binary file]" in result.content


async def test_grep_is_bounded_and_says_how_many_more_lines_matched_in_how_many_files(tmp_path):
    tree(tmp_path, {"a.txt": "hit\n" * (MAX_MATCHES + 10), "b.txt": "hit\n" * 5})
    result = await call(GrepTool, tmp_path, {"pattern": "hit"})
    assert len(paths(result)) == MAX_MATCHES
    assert "[15 more matching lines not shown (2 files matched in all); narrow the pattern, glob or path]" \
        in result.content
    assert result.display == {"matches": MAX_MATCHES + 15, "files": 2}


async def test_grep_cuts_long_matching_lines(tmp_path):
    tree(tmp_path, {"min.js": "x" * 600 + "needle" + "y" * 600 + "\n"})
    [line] = paths(await call(GrepTool, tmp_path, {"pattern": "needle"}))
    assert line.startswith("min.js:1:" + "x" * 500) and line.endswith("characters cut]")


async def test_a_bad_regular_expression_is_a_clear_error_naming_the_pattern(tmp_path):
    result = await call(GrepTool, tmp_path, {"pattern": "def (foo"})
    assert result.error == "invalid regular expression 'def (foo': missing ) at position 8"


async def test_grep_refusals_and_no_matches(tmp_path):
    assert "lies outside" in (await call(GrepTool, tmp_path, {"pattern": "x", "path": "/etc"})).error
    assert (await call(GrepTool, tmp_path, {"pattern": "x", "path": "nope"})).error == "nope does not exist"
    assert (await call(GrepTool, tmp_path, {"pattern": ""})).error == \
        'grep: arguments.pattern: expected a non-empty string, got ""'
    (tmp_path / "a.txt").write_text("abc\n")
    result = await call(GrepTool, tmp_path, {"pattern": "zzz"})
    assert result.error is None and result.content == "No matches for 'zzz' under .."


async def test_grep_skips_symlinked_files_that_point_outside(tmp_path):
    tree(tmp_path / "outside", {"secret.txt": "needle\n"})
    tree(tmp_path / "work", {"a.txt": "needle\n"})
    os.symlink(tmp_path / "outside" / "secret.txt", tmp_path / "work" / "link.txt")
    os.symlink(tmp_path / "work" / "a.txt", tmp_path / "work" / "alias.txt")
    result = await call(GrepTool, tmp_path / "work", {"pattern": "needle"})
    assert paths(result) == ["a.txt:1:needle", "alias.txt:1:needle"]


async def test_outside_a_repository_the_gitignore_files_up_to_the_cwd_apply(tmp_path):
    cwd = tmp_path / "project"
    tree(tmp_path, {".gitignore": "*.txt\n"})  # above the cwd, and no repository: not read
    tree(cwd, {".gitignore": "*.tmp\n", "sub/a.tmp": "", "sub/b.txt": "", "sub/c.py": ""})
    assert paths(await call(GlobTool, cwd, {"pattern": "*", "path": "sub"})) == ["sub/b.txt", "sub/c.py"]


# ----------------------------------------------------------------- hostile patterns (issue 35, finding 3)

# ``(a|aa)+$`` backtracks through every way of splitting the a's (Fibonacci many): about 0.3 s a line of 28 a's
# for ``regex`` (``(a+)+$``, the finding's own, ``regex`` matches at once), about 0.1 s for ``re``.
CATASTROPHIC = "(a|aa)+$"
SLOW_LINE = "a" * 28 + "!"


async def ticking(work: Any) -> tuple[Any, float, float]:
    """``await work()`` while a task sleeps 10 ms at a time: its result, how long it took, and the longest the
    sleeping task waited between two wake-ups (about 10 ms unless something held the event loop, or the GIL)."""
    gaps: list[float] = []

    async def tick() -> None:
        last = time.perf_counter()
        while True:
            await trio.sleep(0.01)
            now = time.perf_counter()
            gaps.append(now - last)
            last = now

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(tick)
            started = time.perf_counter()
            result = await work()
            took = time.perf_counter() - started
            nursery.cancel_scope.cancel()
    return result, took, max(gaps, default=0.0)


async def test_grep_that_runs_out_of_its_match_budget_fails_naming_the_pattern_the_limit_and_where(tmp_path):
    tree(tmp_path, {"a.txt": "fine\n", "b.txt": (SLOW_LINE + "\n") * 40})
    result, took, gap = await ticking(lambda: call(GrepTool(match_seconds=0.5), tmp_path, {"pattern": CATASTROPHIC}))
    assert re.fullmatch(r"grep pattern '\(a\|aa\)\+\$' took longer than 0\.5 s to match \(one call's limit, for "
                        r"its matches over 1 ms each\), at b\.txt:\d+; nothing else was searched: simplify the "
                        r"pattern", result.error), result.error
    assert took < 5  # 40 such lines are 12 s of matching: the budget stopped it
    assert gap < 0.1  # the matching let go of the GIL (re held it a line at a time)


async def test_a_budget_runs_out_on_many_fast_matches_too_and_on_cancellation_the_worker_stops(tmp_path):
    budget = Budget(slow_seconds=10, all_seconds=0.02)
    matcher = Matcher(regex.compile("needle"), budget, "grep pattern", "needle")
    with pytest.raises(TooSlow) as caught:
        for _ in range(1_000_000):  # a microsecond or so each: the 20 ms of all matches run out first
            matcher.search("haystack " * 10)
    assert str(caught.value) == "grep pattern 'needle' took longer than 0.02 s to match in all (one call's limit, " \
                                "for all its matches)"
    fresh = Budget()
    matcher = Matcher(regex.compile("needle"), fresh, "grep pattern", "needle")
    assert matcher.search("a needle") is not None
    fresh.abandon()  # the call was cancelled: its worker stops at its next match
    with pytest.raises(Abandoned):
        matcher.search("a needle")


async def test_grep_patterns_are_regex_syntax_and_bounded_in_size(tmp_path):
    (tmp_path / "a.txt").write_text("abc\n")
    # The regex package's syntax: re's, and Unicode properties.
    assert paths(await call(GrepTool, tmp_path, {"pattern": r"\p{L}{3}"})) == ["a.txt:1:abc"]
    # regex unrolls a repeat's minimum count when it compiles: this one took gigabytes. Its size is read from
    # the text (a group's header counts too), before anything is compiled.
    result = await call(GrepTool, tmp_path, {"pattern": "(?:a{1000}){1000}"})
    assert result.error == ("regular expression '(?:a{1000}){1000}' is too large: its repeats come to 1,003,002 "
                            f"elements (at most {MAX_REGEX_SIZE:,}); use smaller counts in {{m,n}}, or + and *")
    deep = "(" * 600 + "a" + ")" * 600
    assert (await call(GrepTool, tmp_path, {"pattern": deep})).error == \
        f"invalid regular expression {deep!r}: nested too deeply (more than 200 groups open at once)"
    # What re accepts still works, flags and all.
    assert paths(await call(GrepTool, tmp_path, {"pattern": r"(?P<x>B)\w", "case_insensitive": True})) == \
        ["a.txt:1:abc"]


async def test_glob_patterns_too_long_to_compile_are_refused(tmp_path):
    result = await call(GlobTool, tmp_path, {"pattern": "?" * 5000})
    assert result.error == f"{'?' * 5000!r} is too long: its regular expression comes to more than 20,000 characters"


async def test_a_glob_that_runs_out_of_its_budget_fails_naming_the_pattern(tmp_path):
    tree(tmp_path, {"a.py": ""})
    result = await call(GlobTool(match_seconds=0), tmp_path, {"pattern": "*.py"})
    assert result.error == ("glob pattern '*.py' took longer than 0 s to match (one call's limit, for its matches "
                            "over 1 ms each), at 'a.py'; nothing else was searched: simplify the pattern")


async def test_gitignore_lines_git_cannot_parse_are_skipped_and_the_rest_apply(tmp_path):
    tree(tmp_path, {".gitignore": "!\nbad\\\n*.log\n" + "x" * 5000 + "\n", "a.log": "", "b.txt": ""})
    assert paths(await call(GlobTool, tmp_path, {"pattern": "*"})) == ["b.txt"]


async def test_a_hostile_gitignore_pattern_never_holds_the_event_loop(tmp_path):
    # re took about a second a name, holding the GIL (``[^/]*a`` six times over 55 a's); regex does not backtrack.
    tree(tmp_path, {".gitignore": "*a*a*a*a*a*a*b\n", "a" * 55: "", "a" * 56 + "b": "", "c.txt": ""})
    result, _, gap = await ticking(lambda: call(GlobTool, tmp_path, {"pattern": "*"}))
    assert paths(result) == ["a" * 55, "c.txt"]
    assert gap < 0.1


async def test_a_cancelled_grep_stops_its_worker_at_the_next_match(tmp_path):
    # A thousand lines of 0.1-0.3 s each: cancelled after 0.3 s, the worker would go on to its budget (5 s).
    tree(tmp_path, {"b.txt": ("a" * 27 + "!\n") * 1000})
    with trio.move_on_after(0.3):
        await call(GrepTool, tmp_path, {"pattern": CATASTROPHIC})
    await trio.sleep(0.3)  # the match under way when it was cancelled ends
    cpu = time.process_time()
    await trio.sleep(1)
    assert time.process_time() - cpu < 0.3  # nothing is matching any more


async def test_a_gitignore_is_read_and_compiled_within_bounds_and_the_walk_says_what_it_skipped(tmp_path):
    from actors.tools.walk import MAX_GITIGNORE_BYTES, MAX_GITIGNORE_PATTERNS, Ignores

    # Past the patterns bound: the rest of the file is skipped (git would apply it; the walk says so).
    lines = [f"x{n}" for n in range(MAX_GITIGNORE_PATTERNS)] + ["*.log"]
    tree(tmp_path / "many", {".gitignore": "\n".join(lines) + "\n", "a.log": "", "x7": ""})
    walk = Walk(str(tmp_path / "many"), Scope(str(tmp_path)))
    assert sorted(os.path.basename(p) for p, _ in walk.files()) == [".gitignore", "a.log"]
    assert walk.notes == [f"[many/.gitignore is too long: only its first {MAX_GITIGNORE_BYTES // 1024} KiB and "
                          f"{MAX_GITIGNORE_PATTERNS:,} patterns are used, the rest of it was skipped]"]
    # Past the bytes bound: not even read.
    padding = ("# " + "p" * 98 + "\n") * (MAX_GITIGNORE_BYTES // 100 + 10)
    tree(tmp_path / "big", {".gitignore": padding + "*.log\n", "a.log": "", "b.txt": ""})
    walk = Walk(str(tmp_path / "big"), Scope(str(tmp_path)))
    assert sorted(os.path.basename(p) for p, _ in walk.files()) == [".gitignore", "a.log", "b.txt"]
    assert len(walk.notes) == 1 and walk.notes[0].startswith("[big/.gitignore is too long")
    assert Walk(str(tmp_path), Scope(str(tmp_path))).notes == []  # nothing walked, nothing cut

    # Compiling is charged to the call's budget, and stops when the call is abandoned.
    budget = Budget(slow_seconds=10, all_seconds=0.001)
    with pytest.raises(TooSlow) as caught:
        Ignores(budget=budget).entering(str(tmp_path / "many"))
    assert caught.value.what == ".gitignore pattern" and caught.value.source == str(tmp_path / "many" / ".gitignore")
    cancelled = Budget()
    cancelled.abandon()
    with pytest.raises(Abandoned):
        Ignores(budget=cancelled).entering(str(tmp_path / "many"))


async def test_glob_and_grep_say_when_a_gitignore_was_cut_short(tmp_path):
    from actors.tools.walk import MAX_GITIGNORE_PATTERNS

    (tmp_path / ".gitignore").write_text("\n".join([f"x{n}" for n in range(MAX_GITIGNORE_PATTERNS)] + ["*.log"]))
    (tmp_path / "a.log").write_text("needle\n")
    found = await call(GlobTool, tmp_path, {"pattern": "*.log"})
    grepped = await call(GrepTool, tmp_path, {"pattern": "needle"})
    for result in (found, grepped):
        assert "a.log" in result.content  # pattern 5,001 was never used: a.log is not ignored
        assert "[.gitignore is too long" in result.content


# ----------------------------------------------------------------- named pipes and devices


async def test_grep_refuses_a_path_that_is_a_fifo_or_a_device_naming_its_kind(tmp_path):
    os.mkfifo(tmp_path / "pipe")
    outside = Services(runtime=runtime(paths_outside_cwd=True))
    with trio.fail_after(30):
        async with fifo_valve(tmp_path / "pipe") as valve:
            fifo = await call(GrepTool, tmp_path, {"pattern": "x", "path": "pipe"})
            zero = await call(GrepTool, tmp_path, {"pattern": "x", "path": "/dev/zero"}, outside)
    assert valve.stuck == 0  # no reader ever waited on a FIFO
    assert fifo.error == ("pipe is a named pipe (FIFO), not a regular file or a directory; grep searches those "
                          "only")
    assert zero.error.startswith("/dev/zero is a character device, not a regular file or a directory")


async def test_a_gitignore_that_is_a_fifo_gives_no_rules_and_never_blocks_the_walk(tmp_path):
    # The model can mkfifo .gitignore (or .git/info/exclude): the walk's thread blocked in open() for good.
    tree(tmp_path, {"src/a.py": "alpha\n", "src/b.log": "alpha\n", ".git/info/x": ""})
    os.mkfifo(tmp_path / "src" / ".gitignore")
    os.mkfifo(tmp_path / ".git" / "info" / "exclude")
    os.mkfifo(tmp_path / "src" / "pipe.py")
    fifos = [tmp_path / "src" / ".gitignore", tmp_path / ".git" / "info" / "exclude", tmp_path / "src" / "pipe.py"]
    with trio.fail_after(30):
        async with fifo_valve(*fifos) as valve:
            globbed = await call(GlobTool, tmp_path, {"pattern": "**/*"})
            grepped = await call(GrepTool, tmp_path, {"pattern": "alpha"})
    assert valve.stuck == 0  # no reader ever waited on a FIFO
    assert paths(globbed) == ["src/a.py", "src/b.log"]  # the FIFO is no file to list
    assert paths(grepped) == ["src/a.py:1:alpha", "src/b.log:1:alpha"]
