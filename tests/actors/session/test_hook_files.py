"""HookFiles: an unsandboxed hook runs only what the session vouched for (its start, a cwd change, an approved write)."""

from __future__ import annotations

import os

from actors.session.hooks import HookFiles, hook_files, parse_hooks


def config(*commands: str | dict) -> object:
    hooks = [{"type": "command", "command": c} if isinstance(c, str) else c for c in commands]
    return parse_hooks({"Stop": [{"hooks": hooks}]})


def test_a_script_that_appears_changes_or_is_swapped_stops_its_hook(tmp_path):
    (tmp_path / "lint.sh").write_text("true\n")
    hooks = config("./check.sh", "./lint.sh")
    check, lint = hooks.stop[0].commands
    files = HookFiles(hooks, str(tmp_path))
    assert files.changed(check) is None and files.changed(lint) is None
    (tmp_path / "check.sh").write_text("cat token\n")  # missing when vouched for, made since
    assert "check.sh changed" in files.changed(check)
    (tmp_path / "lint.sh").write_text("cat token\n")
    assert "lint.sh changed" in files.changed(lint)
    files.vouch(str(tmp_path / "lint.sh"))  # the user approved that write
    assert files.changed(lint) is None
    (tmp_path / "real.sh").write_text("cat token\n")
    os.remove(tmp_path / "lint.sh")
    os.symlink("real.sh", tmp_path / "lint.sh")  # the same bytes elsewhere are not the same file
    (tmp_path / "real.sh").write_text("cat token\n")
    assert "lint.sh changed" in files.changed(lint)
    files.vouch_all(str(tmp_path))  # a cwd set again: the user's doing
    assert files.changed(check) is None and files.changed(lint) is None


def test_what_a_command_runs_beyond_its_words_is_watched(tmp_path):
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "check.py").write_text("import json\n")
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    hooks = config("python3 hooks/check.py", "python3 -m pkg.sub", "bash -c 'sh tools/run.sh'")
    script, module, nested = hooks.stop[0].commands
    files = HookFiles(hooks, str(tmp_path))
    (tmp_path / "hooks" / "json.py").write_text("import os\n")  # a sibling the script imports first
    assert "json.py appeared" in files.changed(script)
    (tmp_path / "pkg" / "sub" / "__init__.py").write_text("import os\n")
    assert "__init__.py changed" in files.changed(module)
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "run.sh").write_text("id\n")
    assert "run.sh changed" in files.changed(nested)
    protected = hook_files(hooks, str(tmp_path))
    assert str(tmp_path / "hooks" / "json.py") in protected and str(tmp_path / "tools" / "run.sh") in protected


def test_a_sandboxed_hook_is_not_watched_and_its_files_are_not_protected(tmp_path):
    hooks = config({"type": "command", "command": "sh ci.sh", "sandbox": True})
    files = HookFiles(hooks, str(tmp_path))
    (tmp_path / "ci.sh").write_text("make\n")
    assert files.changed(hooks.stop[0].commands[0]) is None
    assert hook_files(hooks, str(tmp_path)) == ()
