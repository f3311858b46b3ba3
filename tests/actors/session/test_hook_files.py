"""HookFiles: an unsandboxed hook runs only what the user vouched for (the first session in a cwd, a cwd
set through the API, an approved write)."""

from __future__ import annotations

import os

from actors.session.hooks import HookFiles, hook_files, hook_files_for, parse_hooks


def config(*commands: str | dict) -> object:
    hooks = [{"type": "command", "command": c} if isinstance(c, str) else c for c in commands]
    return parse_hooks({"Stop": [{"hooks": hooks}]})


def test_a_script_that_appears_changes_or_is_swapped_stops_its_hook(tmp_path):
    (tmp_path / "lint.sh").write_text("true\n")
    hooks = config("./check.sh", "./lint.sh")
    check, lint = hooks.stop[0].commands
    files = HookFiles(hooks, str(tmp_path))
    assert files.why_refused(check) is None and files.why_refused(lint) is None
    (tmp_path / "check.sh").write_text("cat token\n")  # missing when vouched for, made since
    assert "check.sh changed" in files.why_refused(check)
    (tmp_path / "lint.sh").write_text("cat token\n")
    assert "lint.sh changed" in files.why_refused(lint)
    files.vouch(str(tmp_path / "lint.sh"))  # the user approved that write
    assert files.why_refused(lint) is None
    os.remove(tmp_path / "lint.sh")
    (tmp_path / "real.sh").write_text("cat token\n")
    os.symlink("real.sh", tmp_path / "lint.sh")  # the same bytes elsewhere are not the same file
    assert "lint.sh changed" in files.why_refused(lint)
    files.vouch_all(str(tmp_path))  # a cwd set again: the user's doing
    assert files.why_refused(check) is None and files.why_refused(lint) is None


def test_a_bare_word_that_was_no_file_is_not_watched(tmp_path):
    """``grep -q rm``: a file named ``rm`` made later must not switch the guard off (nor on)."""
    hooks = config("jq -r .tool_input.command | grep -q rm && exit 2")
    guard = hooks.stop[0].commands[0]
    files = HookFiles(hooks, str(tmp_path))
    (tmp_path / "rm").write_text("")
    assert files.why_refused(guard) is None


def test_what_a_command_runs_beyond_its_words_is_watched(tmp_path):
    (tmp_path / "hooks").mkdir()
    (tmp_path / "hooks" / "check.py").write_text("import json\n")
    (tmp_path / "lint.py").write_text("import json\n")
    (tmp_path / "pkg" / "sub").mkdir(parents=True)
    hooks = config("python3 hooks/check.py", "python3 -m pkg.sub", "bash -c 'sh tools/run.sh'", "python3 lint.py")
    script, module, nested, top = hooks.stop[0].commands
    files = HookFiles(hooks, str(tmp_path))
    (tmp_path / "hooks" / "json.py").write_text("import os\n")  # a sibling the script imports first
    assert "json.py appeared" in files.why_refused(script)
    (tmp_path / "pkg" / "__init__.py").write_text("import os\n")  # imported before pkg.sub
    assert "__init__.py" in files.why_refused(module)
    (tmp_path / "tools").mkdir()
    (tmp_path / "tools" / "run.sh").write_text("id\n")
    assert "run.sh changed" in files.why_refused(nested)
    (tmp_path / "notes.txt").write_text("")  # not Python: a script in the cwd watches only *.py beside it
    assert files.why_refused(top) is None
    (tmp_path / "json.py").write_text("import os\n")
    assert "json.py appeared" in files.why_refused(top)
    protected = hook_files(hooks, str(tmp_path))
    assert str(tmp_path / "hooks" / "json.py") in protected and str(tmp_path / "tools" / "run.sh") in protected


def test_a_later_session_in_the_cwd_inherits_what_was_vouched_for(tmp_path):
    """A subagent's child session, or any new one, does not vouch for what the model left on disk."""
    hooks = config("./check.sh")
    vouched: dict = {}
    first = hook_files_for(vouched, hooks, str(tmp_path))
    (tmp_path / "check.sh").write_text("cat token\n")
    later = hook_files_for(vouched, hooks, str(tmp_path))
    assert later is first and "check.sh changed" in later.why_refused(hooks.stop[0].commands[0])


def test_a_sandboxed_hook_is_not_watched_and_its_files_are_not_protected(tmp_path):
    hooks = config({"type": "command", "command": "sh ci.sh", "sandbox": True})
    files = HookFiles(hooks, str(tmp_path))
    (tmp_path / "ci.sh").write_text("make\n")
    assert files.why_refused(hooks.stop[0].commands[0]) is None
    assert hook_files(hooks, str(tmp_path)) == ()


async def test_a_refused_guard_fails_closed_and_any_other_hook_fails_open(tmp_path):
    from actors.session.hooks import run_hooks

    hooks = config("./guard.sh")
    files = HookFiles(hooks, str(tmp_path))
    (tmp_path / "guard.sh").write_text("exit 0\n")  # made after the vouch: the guard is not run
    ran: list = []

    async def runner(hook, stdin, cwd):
        ran.append(hook.command)
        return 0, "", ""

    closed = await run_hooks(hooks.stop, {}, str(tmp_path), runner=runner, files=files, refused_blocks=True)
    opened = await run_hooks(hooks.stop, {}, str(tmp_path), runner=runner, files=files)
    assert ran == []
    assert closed.blocked and "guard.sh" in closed.block_reasons[0] and closed.failures
    assert not opened.blocked and "not run" in opened.failures[0]


def test_a_file_the_hook_only_writes_is_not_watched_and_one_it_reads_or_runs_is(tmp_path):
    """``echo stop >> stops.log``: the hook changes its own log each time it runs, which stopped it for good."""
    log = tmp_path / "logs" / "stops.log"
    hooks = config(f"echo stop >> {log}", "./run.sh 2>&1 | tee -a tee.log", "sh < ./check.sh > out.txt",
                   "./gen.sh > made.sh && sh made.sh", "python3 -c 'print(1)' &>all.log 2>/dev/null")
    append, teed, fed, generated, quiet = hooks.stop[0].commands
    (tmp_path / "check.sh").write_text("exit 0\n")
    files = HookFiles(hooks, str(tmp_path))
    log.parent.mkdir()
    log.write_text("stop\n")
    for name in ("tee.log", "out.txt", "all.log"):
        (tmp_path / name).write_text("written by the hook\n")
    assert files.why_refused(append) is None and files.why_refused(teed) is None
    assert files.why_refused(quiet) is None and files.why_refused(fed) is None
    (tmp_path / "made.sh").write_text("id\n")  # written by the hook, but run by it too
    assert "made.sh changed" in files.why_refused(generated)
    (tmp_path / "check.sh").write_text("cat token\n")  # what `sh <` runs
    assert "check.sh changed" in files.why_refused(fed)
    protected = hook_files(hooks, str(tmp_path))
    assert str(tmp_path / "check.sh") in protected and str(tmp_path / "made.sh") in protected
    assert not {str(log), str(tmp_path / "tee.log"), str(tmp_path / "out.txt")} & set(protected)


async def test_a_refused_stop_hook_fails_open_and_a_refused_pre_tool_use_hook_still_blocks(tmp_path):
    """A Stop block re-prompts the model, which cannot vouch for a file: the turn would loop to the cap."""
    from actors.session.hooks import run_hooks

    hooks = config("./guard.sh")
    files = HookFiles(hooks, str(tmp_path))
    (tmp_path / "guard.sh").write_text("exit 0\n")

    async def runner(hook, stdin, cwd):
        raise AssertionError("a refused hook ran")

    stop = await run_hooks(hooks.stop, {"hook_event_name": "Stop"}, str(tmp_path), runner=runner, files=files,
                           refused_blocks=True)
    pre = await run_hooks(hooks.stop, {"hook_event_name": "PreToolUse"}, str(tmp_path), runner=runner,
                          files=files, refused_blocks=True)
    assert not stop.blocked and "not run" in stop.failures[0] and "guard.sh changed" in stop.failures[0]
    assert pre.blocked and pre.failures
