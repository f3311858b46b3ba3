"""Report files a subagent names: used only under the run's cwd, symlinks resolved; the signal is kept either way."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from actors.subagents.files import append_report, check_named_report
from tests.actors.subagents.test_goal_loop import FakeRunner, make_run, running, signal


@pytest.fixture
def tree(tmp_path):
    cwd, outside = tmp_path / "work", tmp_path / "outside"
    cwd.mkdir()
    outside.mkdir()
    (outside / "bashrc").write_text("original\n")
    (cwd / "inside.md").write_text("")
    (cwd / "link.md").symlink_to(outside / "bashrc")
    (cwd / "sub").mkdir()
    return cwd, outside


@pytest.mark.parametrize("named", ["../outside/bashrc", "{outside}/bashrc", "link.md", "sub/../../outside/bashrc"])
def test_paths_leading_outside_the_cwd_are_refused(tree, named):
    cwd, outside = tree
    path = Path(cwd, named.format(outside=outside))
    assert "lies outside the run's working directory" in check_named_report(path, cwd)


def test_a_file_under_the_cwd_and_a_symlink_that_stays_inside_are_accepted(tree):
    cwd, _ = tree
    (cwd / "inner-link.md").symlink_to(cwd / "inside.md")
    assert check_named_report(cwd / "inside.md", cwd) is None
    assert check_named_report(cwd / "inner-link.md", cwd) is None
    assert "does not exist" in check_named_report(cwd / "missing.md", cwd)
    assert "not a regular file" in check_named_report(cwd / "sub", cwd)


def test_a_swap_to_a_symlink_after_the_check_is_refused_at_append(tree):
    cwd, outside = tree
    target = cwd / "inside.md"
    assert check_named_report(target, cwd) is None
    target.unlink()
    target.symlink_to(outside / "bashrc")
    with pytest.raises(OSError):
        append_report(target, "stolen", confine=cwd)
    assert (outside / "bashrc").read_text() == "original\n"


@pytest.mark.parametrize("named", ["../outside/bashrc", "link.md"])
async def test_goal_reached_with_an_outside_report_is_recorded_and_says_why_nothing_was_written(tree, named):
    cwd, outside = tree
    run = make_run(cwd, report=False)
    answers = []

    async def act(run_):
        from actors.subagents.run import Signal

        is_error, text = await run_.ref.ask(lambda reply: Signal("goal_reached", {"summary": "done",
                                                                                "report_file": named}, reply))
        answers.append((is_error, text))
        return "stop reason end_turn"

    async with running(run, FakeRunner(act)):
        await run.ended.wait()
    assert (outside / "bashrc").read_text() == "original\n"
    is_error, text = answers[0]
    assert not is_error and "Recorded goal_reached" in text
    assert "nothing was written to it" in text and "outside the run's working directory" in text
    status = run.status()
    assert status["endReason"] == "goal_reached" and status["reportFile"] is None


async def test_goal_reached_with_a_report_inside_the_cwd_is_appended(tree):
    cwd, _ = tree
    run = make_run(cwd, report=False)
    async with running(run, FakeRunner(signal("goal_reached", summary="done", report_file="inside.md"))):
        await run.ended.wait()
    assert "end reason: goal_reached" in (cwd / "inside.md").read_text()
    assert run.status()["reportFile"] == os.path.realpath(cwd / "inside.md")


def test_a_directory_swapped_for_a_symlink_on_the_way_is_refused_at_append(tree):
    cwd, outside = tree
    (cwd / "d").mkdir()
    (cwd / "d" / "r.md").write_text("")
    assert check_named_report(cwd / "d" / "r.md", cwd) is None
    (cwd / "d" / "r.md").unlink()
    (cwd / "d").rmdir()
    (outside / "r.md").write_text("untouched\n")
    (cwd / "d").symlink_to(outside)  # the race the check at goal_reached cannot see
    with pytest.raises(OSError):
        append_report(cwd / "d" / "r.md", "stolen", confine=cwd)
    assert (outside / "r.md").read_text() == "untouched\n"
