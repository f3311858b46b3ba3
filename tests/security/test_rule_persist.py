"""Keeping a permission rule in the settings file (``POST /session/:id/permissions`` with ``persist:
"settings"``, :func:`actors.settings_file.add_permission_rule`).

- It read the file through a symlink standing at the settings path and then replaced the link with what it
  read plus the rule: a model that can write where the file lives (a settings file in the project) could
  plant one to have another file copied out, or (dangling) have a settings file made where it chose. Now a
  symlink there is refused with an error naming the path, and nothing is read or changed; so is anything but
  a regular file.
- It was an unlocked read-modify-write: two rules kept at once (two "always" answers, two clients) each read
  the old file, and the later rename dropped the other's rule. Now the writers take turns (an ``flock`` on the
  file's directory), threads of one daemon and other daemons alike, each reading what the one before wrote.

Each test fails on the code before the fix.
"""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import pytest
import trio

from actors import settings_file
from actors.settings import SettingsError
from actors.settings_file import add_permission_rule, load_settings

SETTINGS = {"approvalMode": "default", "permissions": {"allow": ["Read(./src/**)"]}}


def settings_at(directory: Path) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "settings.json"
    path.write_text(json.dumps(SETTINGS))
    return path


# ----------------------------------------------------------------- a symlink at the settings path


@pytest.mark.parametrize("target", ["settings", "secret", "dangling"])
def test_a_symlink_at_the_settings_path_is_refused_naming_it_and_nothing_changes(tmp_path: Path, target: str) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    pointed = elsewhere / "file"
    contents = {"settings": json.dumps(SETTINGS), "secret": '{"token": "SECRET-VALUE"}', "dangling": None}[target]
    if contents is not None:
        pointed.write_text(contents)
    project = tmp_path / "project" / ".trellis"
    project.mkdir(parents=True)
    link = project / "settings.json"
    link.symlink_to(pointed)

    with pytest.raises(SettingsError) as info:
        add_permission_rule(link, "allow", "Bash(npm test:*)")
    message = str(info.value)
    assert str(link) in message and "symbolic link" in message and "nothing was changed" in message, message
    # The link is still the link, the file it points to as it was; nothing else was made.
    assert link.is_symlink() and os.readlink(link) == str(pointed)
    assert (pointed.read_text() if pointed.exists() else None) == contents
    assert sorted(p.name for p in project.iterdir()) == ["settings.json"]
    assert sorted(p.name for p in elsewhere.iterdir()) == ([] if contents is None else ["file"])


def test_a_settings_path_that_is_no_regular_file_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "settings.json"
    path.mkdir()
    with pytest.raises(SettingsError, match="not a regular file"):
        add_permission_rule(path, "allow", "Bash(npm test:*)")
    assert path.is_dir() and not any(path.iterdir())


def test_a_symlinked_directory_above_the_file_is_still_written(tmp_path: Path) -> None:
    """Only the file itself must not be a link: ~/.config is often one (a dotfiles checkout)."""
    real = tmp_path / "dotfiles"
    path = settings_at(real / "trellis")
    (tmp_path / "config").symlink_to(real)
    assert add_permission_rule(tmp_path / "config" / "trellis" / "settings.json", "allow", "Bash(npm test:*)")
    assert json.loads(path.read_text())["permissions"]["allow"] == ["Read(./src/**)", "Bash(npm test:*)"]


def test_the_file_keeps_its_mode_and_the_rest_of_what_it_held(tmp_path: Path) -> None:
    path = settings_at(tmp_path)
    os.chmod(path, 0o640)
    assert add_permission_rule(path, "deny", "Bash(rm:*)") is True
    assert add_permission_rule(path, "deny", "Bash(rm:*)") is False  # there already
    assert os.stat(path).st_mode & 0o777 == 0o640
    data = json.loads(path.read_text())
    assert data == {**SETTINGS, "permissions": {"allow": ["Read(./src/**)"], "deny": ["Bash(rm:*)"]}}
    assert [p.name for p in tmp_path.iterdir()] == ["settings.json"]  # no lock file, no temporary left
    new = tmp_path / "new" / "settings.json"
    assert add_permission_rule(new, "allow", "Bash(ls:*)") and os.stat(new).st_mode & 0o777 == 0o600


# ----------------------------------------------------------------- concurrent writers


async def test_rules_kept_at_once_all_land(tmp_path: Path) -> None:
    """As the REST route runs it: each in a worker thread, all at once."""
    path = settings_at(tmp_path)
    rules = [f"Bash(tool{n}:*)" for n in range(24)]
    written: list[bool] = []

    async def keep(rule: str) -> None:
        written.append(await trio.to_thread.run_sync(add_permission_rule, path, "allow", rule))

    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            for rule in rules:
                nursery.start_soon(keep, rule)
    assert written == [True] * len(rules)
    allowed = json.loads(path.read_text())["permissions"]["allow"]
    assert sorted(allowed) == sorted(["Read(./src/**)", *rules]), f"lost: {set(rules) - set(allowed)}"
    assert load_settings(path).permissions.allow  # still reads as settings


async def test_a_writer_waits_for_another_holding_the_lock_then_reads_what_it_wrote(tmp_path: Path) -> None:
    """Another daemon's write under way (its lock held): this one waits, and keeps the other's rule."""
    path = settings_at(tmp_path)
    held = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        async with trio.open_nursery() as nursery:
            done = trio.Event()

            async def keep() -> None:
                await trio.to_thread.run_sync(add_permission_rule, path, "allow", "Bash(mine:*)")
                done.set()

            nursery.start_soon(keep)
            await trio.sleep(0.3)
            assert not done.is_set(), "wrote while another writer held the lock"
            # The other writer's rule goes in while it holds the lock, then it lets go.
            data = json.loads(path.read_text())
            data["permissions"]["allow"].append("Bash(theirs:*)")
            path.write_text(json.dumps(data))
            fcntl.flock(held, fcntl.LOCK_UN)
            with trio.fail_after(10):
                await done.wait()
    finally:
        os.close(held)
    assert json.loads(path.read_text())["permissions"]["allow"] == ["Read(./src/**)", "Bash(theirs:*)",
                                                                    "Bash(mine:*)"]


def test_a_lock_held_without_end_fails_the_write_instead_of_hanging(tmp_path: Path, monkeypatch) -> None:
    path = settings_at(tmp_path)
    before = path.read_text()
    monkeypatch.setattr(settings_file, "RULE_LOCK_WAIT", 0.2)
    held = os.open(tmp_path, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)
    try:
        with pytest.raises(SettingsError, match="stayed locked by another writer") as info:
            add_permission_rule(path, "allow", "Bash(npm test:*)")
    finally:
        os.close(held)
    assert str(path) in str(info.value)
    assert path.read_text() == before
