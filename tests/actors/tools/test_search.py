"""glob and grep (actors/tools/search.py, walk.py) on real trees: .gitignore, bounds, refusals."""

from __future__ import annotations

import os
from pathlib import Path

from actors.tools import GlobTool, GrepTool
from actors.tools.paths import Scope
from actors.tools.search import MAX_FILES, MAX_MATCHES
from actors.tools.walk import Walk
from tests.actors.tools.harness import Services, call, runtime


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
    assert result.error == "invalid regular expression 'def (foo': missing ), unterminated subpattern at position 4"


async def test_grep_refusals_and_no_matches(tmp_path):
    assert "lies outside" in (await call(GrepTool, tmp_path, {"pattern": "x", "path": "/etc"})).error
    assert (await call(GrepTool, tmp_path, {"pattern": "x", "path": "nope"})).error == "nope does not exist"
    assert (await call(GrepTool, tmp_path, {"pattern": ""})).error == "pattern must be a non-empty string"
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
