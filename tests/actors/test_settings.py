"""Daemon settings (actors/settings.py): defaults, the settings file, warnings, errors, overrides."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from actors.settings import Limits, Settings, SettingsError
from actors.settings_file import load_settings, settings_from_dict


def write(tmp_path: Path, data: Any, name: str = "settings.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(data))
    return path


def test_defaults() -> None:
    s = Settings()
    assert s.todo_stop_guard is False
    assert s.guard_enabled is False
    assert (s.followup_suggestions, s.disable_all_hooks, s.safe_mode, s.bare) == (False, False, False, False)
    assert s.approval_mode == "default"
    assert s.hooks == {} and s.model == {}
    assert s.warnings == ()
    assert s.limits == Limits()
    assert (s.limits.max_sessions, s.limits.max_pending_prompts, s.limits.max_mid_turn_messages,
            s.limits.event_ring_size, s.limits.subscriber_queue, s.limits.mailbox_size) == (256, 32, 32, 8000, 256, 64)
    assert load_settings(None) == Settings()


def test_file_with_known_keys(tmp_path: Path) -> None:
    path = write(tmp_path, {
        "experimental": {"todoStopGuard": True},
        "ui": {"enableFollowupSuggestions": True},
        "disableAllHooks": True,
        "approvalMode": "auto-edit",
        "sandbox": "off",
        "storage": {"fsync": "never"},
        "hooks": {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]},
        "model": {"provider": "openai", "baseUrl": "http://127.0.0.1:1/v1"},
        "limits": {"maxSessions": 3, "maxPendingPrompts": 4, "maxMidTurnMessages": 5, "eventRingSize": 100,
                   "subscriberQueue": 16},
    })
    s = load_settings(path)
    assert s.todo_stop_guard is True and s.guard_enabled is True
    assert s.followup_suggestions is True
    assert s.disable_all_hooks is True
    assert s.approval_mode == "auto-edit"
    assert (s.sandbox, s.journal_fsync, s.path) == ("off", "never", str(path))
    assert s.hooks == {"Stop": [{"hooks": [{"type": "command", "command": "true"}]}]}
    assert s.model["provider"] == "openai"
    assert s.limits == Limits(max_sessions=3, max_pending_prompts=4, max_mid_turn_messages=5, event_ring_size=100,
                              subscriber_queue=16)
    assert s.warnings == ()


def test_dotted_keys_at_top_level_are_accepted(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, {"experimental.todoStopGuard": True, "limits.maxSessions": 2}))
    assert s.todo_stop_guard is True
    assert s.limits.max_sessions == 2
    assert s.warnings == ()


def test_disable_all_hooks_does_not_disable_the_guard(tmp_path: Path) -> None:
    s = load_settings(write(tmp_path, {"experimental": {"todoStopGuard": True}, "disableAllHooks": True}))
    assert s.guard_enabled is True


def test_unknown_keys_become_warnings_not_errors(tmp_path: Path) -> None:
    path = write(tmp_path, {
        "theme": "dark",
        "experimental": {"todoStopGuard": True, "somethingElse": 1},
        "ui": {"colour": "blue"},
        "limits": {"mailboxSize": 8, "maxSessions": 9},
    })
    s = load_settings(path)
    assert s.todo_stop_guard is True
    assert s.limits.max_sessions == 9
    assert s.limits.mailbox_size == 64  # the unknown key changed nothing
    assert len(s.warnings) == 4
    joined = "\n".join(s.warnings)
    for key in ("'theme'", "'experimental.somethingElse'", "'ui.colour'", "'limits.mailboxSize'"):
        assert key in joined
    assert all(w.startswith(str(path)) for w in s.warnings)


def test_a_misspelt_member_of_model_or_subagents_is_warned_of(tmp_path: Path) -> None:
    """Before, ``model.provder`` was ignored without a word, and the daemon silently played the demo model."""
    path = write(tmp_path, {
        "model": {"provder": "openai", "baseURL": "http://127.0.0.1:9/v1", "name": "x"},
        "subagents": {"defaultRuner": "command", "runners": {"sesion": {"approvalMode": "yolo"},
                                                             "session": {"aprovalMode": "yolo"}}},
    })
    s = load_settings(path)
    assert sorted(w.split("unknown key ")[1] for w in s.warnings) == [
        "'model.baseURL' ignored", "'model.provder' ignored", "'subagents.defaultRuner' ignored",
        "'subagents.runners.sesion' ignored", "'subagents.runners.session.aprovalMode' ignored"]
    assert s.model.get("name") == "x"  # the rest is read as before


def test_a_misspelt_member_of_a_hook_or_its_group_is_warned_of_and_the_hook_still_runs(tmp_path: Path) -> None:
    """Before, ``timout`` was ignored without a word: the hook kept the 60-second default."""
    path = write(tmp_path, {"hooks": {"Stop": [{"matcher": "", "macher": "Bash",
                                                "hooks": [{"command": "make check", "timout": 5}]}]}})
    s = load_settings(path)
    assert sorted(w.split("unknown key ")[1] for w in s.warnings) == [
        "'hooks.Stop[0].hooks[0].timout' ignored", "'hooks.Stop[0].macher' ignored"]
    [group] = s.hook_config.stop
    assert [(c.command, c.timeout) for c in group.commands] == [("make check", 60.0)]


def test_an_openai_model_the_settings_leave_without_a_url_is_refused_naming_the_file(tmp_path: Path) -> None:
    from actors import provider_from_settings
    path = write(tmp_path, {"model": {"provider": "openai"}})
    with pytest.raises(SettingsError) as refused:
        provider_from_settings(load_settings(path), {})
    assert str(refused.value).startswith(f"{path}: settings model.provider \"openai\" needs a base URL")


@pytest.mark.parametrize(
    ("data", "key"),
    [
        ({"experimental": {"todoStopGuard": "true"}}, "experimental.todoStopGuard"),
        ({"experimental": {"todoStopGuard": 1}}, "experimental.todoStopGuard"),
        ({"ui": {"enableFollowupSuggestions": None}}, "ui.enableFollowupSuggestions"),
        ({"disableAllHooks": "yes"}, "disableAllHooks"),
        ({"approvalMode": 3}, "approvalMode"),
        ({"approvalMode": "sometimes"}, "approvalMode"),
        ({"sandbox": "maybe"}, "sandbox"),
        ({"sandbox": True}, "sandbox"),
        ({"storage": {"fsync": "sometimes"}}, "storage.fsync"),
        ({"storage": {"fsync": False}}, "storage.fsync"),
        ({"hooks": []}, "hooks"),
        ({"model": "gpt"}, "model"),
        ({"limits": {"maxSessions": "3"}}, "limits.maxSessions"),
        ({"limits": {"maxSessions": True}}, "limits.maxSessions"),
        ({"limits": {"maxPendingPrompts": 0}}, "limits.maxPendingPrompts"),
        ({"limits": {"eventRingSize": -5}}, "limits.eventRingSize"),
        ({"limits": {"subscriberQueue": 2.5}}, "limits.subscriberQueue"),
        ({"limits": {"maxMidTurnMessages": None}}, "limits.maxMidTurnMessages"),
    ],
)
def test_wrong_types_raise_naming_the_dotted_key(tmp_path: Path, data: dict[str, Any], key: str) -> None:
    path = write(tmp_path, data)
    with pytest.raises(SettingsError) as info:
        load_settings(path)
    message = str(info.value)
    assert key in message
    assert message.startswith(str(path))


def test_top_level_must_be_an_object(tmp_path: Path) -> None:
    path = write(tmp_path, ["experimental"])
    with pytest.raises(SettingsError) as info:
        load_settings(path)
    assert str(info.value).startswith(str(path))


def test_invalid_json_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "broken.json"
    path.write_text('{"experimental": {')
    with pytest.raises(SettingsError) as info:
        load_settings(path)
    assert str(info.value).startswith(f"{path}: invalid JSON")


def test_missing_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.json"
    with pytest.raises(SettingsError) as info:
        load_settings(path)
    assert str(info.value).startswith(f"{path}: cannot read")


def test_directory_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(SettingsError) as info:
        load_settings(tmp_path)
    assert str(info.value).startswith(f"{tmp_path}: cannot read")


def test_undecodable_file_names_the_file(tmp_path: Path) -> None:
    path = tmp_path / "latin1.json"
    path.write_bytes(b'{"theme": "caf\xe9"}')
    with pytest.raises(SettingsError) as info:
        load_settings(path)
    assert str(path) in str(info.value)


def test_overrides_apply_on_top_of_the_file(tmp_path: Path) -> None:
    path = write(tmp_path, {"experimental": {"todoStopGuard": True}, "limits": {"maxSessions": 3, "eventRingSize": 50}})
    s = load_settings(path, safe_mode=True, max_sessions=7, subscriber_queue=32, event_ring_size=None, bare=None)
    assert s.safe_mode is True
    assert s.bare is False  # None means "not given"
    assert s.limits.max_sessions == 7  # the flag wins over the file
    assert s.limits.event_ring_size == 50  # kept from the file
    assert s.limits.subscriber_queue == 32
    assert s.todo_stop_guard is True
    assert s.guard_enabled is False


def test_overrides_without_a_file() -> None:
    s = load_settings(None, todo_stop_guard=True, approval_mode="yolo", mailbox_size=8)
    assert s.guard_enabled is True
    assert s.approval_mode == "yolo"
    assert s.limits.mailbox_size == 8


@pytest.mark.parametrize(
    ("flags", "enabled"),
    [
        ({}, True),
        ({"safe_mode": True}, False),
        ({"bare": True}, False),
        ({"safe_mode": True, "bare": True}, False),
        ({"todo_stop_guard": False}, False),
    ],
)
def test_guard_enabled_is_forced_off_by_safe_mode_and_bare(flags: dict[str, bool], enabled: bool) -> None:
    s = load_settings(None, **{"todo_stop_guard": True, **flags})
    assert s.guard_enabled is enabled


def test_settings_from_dict_layers_on_a_base() -> None:
    base = settings_from_dict({"theme": 1, "limits": {"maxSessions": 4}}, source="first")
    s = settings_from_dict({"limits": {"eventRingSize": 9}, "other": 2}, source="second", base=base)
    assert s.limits.max_sessions == 4 and s.limits.event_ring_size == 9
    assert len(s.warnings) == 2
    assert s.warnings[0].startswith("first") and s.warnings[1].startswith("second")
    with pytest.raises(SettingsError) as info:
        settings_from_dict("nope", source="inline")
    assert str(info.value).startswith("inline")


def test_a_group_that_is_not_an_object_is_refused_with_json_type_names(tmp_path):
    import pytest

    from actors.settings import SettingsError
    from actors.settings_file import load_settings

    path = tmp_path / "settings.json"
    for document, message in [('{"limits": 5}', "limits: must be an object, got 5"),
                              ('{"experimental": true}', "experimental: must be an object, got true"),
                              ('{"approvalMode": ["yolo"]}', "approvalMode: must be one of .*, got an array"),
                              ('{"limits": {"shutdownSeconds": NaN}}', "invalid JSON: NaN is not a JSON number"),
                              ('{"limits": {"clientGraceSeconds": Infinity}}', "Infinity is not a JSON number")]:
        path.write_text(document)
        with pytest.raises(SettingsError, match=message.replace("(", r"\(")):
            load_settings(path)


# ------------------------------------------------------------------ sandbox: a mode, or {"mode", "env"}


def test_the_sandbox_object_form_carries_the_mode_and_the_environment_additions(tmp_path: Path) -> None:
    from actors.process import SandboxSetting

    s = load_settings(write(tmp_path, {"sandbox": {"mode": "off", "env": ["GOPATH", "PIP_INDEX_URL"]}}))
    assert s.sandbox == SandboxSetting("off", (("GOPATH", None), ("PIP_INDEX_URL", None)))
    s = load_settings(write(tmp_path, {"sandbox": {"env": {"CI": "1"}}}))
    assert s.sandbox == SandboxSetting("auto", (("CI", "1"),))
    # Without additions the object is its mode, as the string form is.
    assert load_settings(write(tmp_path, {"sandbox": {"mode": "bwrap"}})).sandbox == "bwrap"
    assert load_settings(write(tmp_path, {"sandbox": {}})).sandbox == "auto"


def test_the_sandbox_object_form_carries_the_process_limit(tmp_path: Path) -> None:
    from actors.process import SandboxSetting

    assert Settings().sandbox == "auto"  # the default limit (1024) needs no object
    s = load_settings(write(tmp_path, {"sandbox": {"mode": "off", "maxProcesses": 0}}))
    assert s.sandbox == SandboxSetting("off", max_processes=0)
    assert load_settings(write(tmp_path, {"sandbox": {"maxProcesses": 256}}), sandbox="bwrap").sandbox == \
        SandboxSetting("bwrap", max_processes=256)  # --sandbox sets the mode, the file's limit stays


def test_the_cluster_opt_out_is_read_from_the_cluster_group(tmp_path: Path) -> None:
    assert Settings().cluster_allow_unauthenticated == ()
    s = load_settings(write(tmp_path, {"cluster": {"allowUnauthenticated": ["redis"]}}))
    assert s.cluster_allow_unauthenticated == ("redis",)
    s = load_settings(write(tmp_path, {"cluster.allowUnauthenticated": ["postgresql", "redis"]}))
    assert s.cluster_allow_unauthenticated == ("postgresql", "redis")


def test_the_sandbox_flag_overrides_the_mode_and_keeps_the_files_env(tmp_path: Path) -> None:
    from actors.process import SandboxSetting

    path = write(tmp_path, {"sandbox": {"mode": "bwrap", "env": ["GOPATH"]}})
    assert load_settings(path, sandbox="off").sandbox == SandboxSetting("off", (("GOPATH", None),))
    assert load_settings(None, sandbox="off").sandbox == "off"


@pytest.mark.parametrize(
    ("data", "words"),
    [
        ({"sandbox": {"mode": "maybe"}}, ["sandbox.mode", '"maybe"']),
        ({"sandbox": {"env": "GOPATH"}}, ["sandbox.env: must be an array"]),
        ({"sandbox": {"env": [3]}}, ["sandbox.env[0]"]),
        ({"sandbox": {"env": ["A=1"]}}, ["sandbox.env[0]", '"A=1" is not a variable name']),
        ({"sandbox": {"env": {"A": 1}}}, ["sandbox.env.A: must be a string"]),
        ({"sandbox": {"env": {"A": "x\u0000y"}}}, ["sandbox.env.A: must not contain a NUL character"]),
        ({"sandbox": {"env": ["TRELLIS_TOKEN"]}}, ["sandbox.env", "TRELLIS_TOKEN", "daemon's own credential"]),
        ({"sandbox": {"env": {"OPENAI_API_KEY": "sk"}}}, ["sandbox.env", "OPENAI_API_KEY"]),
        ({"sandbox": {"env": ["TRELLIS_STORE"]}}, ["sandbox.env", "TRELLIS_STORE"]),
        ({"sandbox": {"mode": "off", "extra": 1}}, ["sandbox.extra: unknown key"]),
        ({"subagents": {"runners": {"command": {"env": ["OPENAI_API_KEY"]}}}},
         ["subagents.runners.command.env", "OPENAI_API_KEY", "daemon's own credential"]),
        ({"subagents": {"runners": {"command": {"env": 5}}}}, ["subagents.runners.command.env: must be"]),
    ],
)
def test_a_bad_sandbox_or_runner_env_is_refused_naming_the_file_the_key_and_the_name(
        tmp_path: Path, data: dict[str, Any], words: list[str]) -> None:
    path = write(tmp_path, data)
    with pytest.raises(SettingsError) as info:
        load_settings(path)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    for word in words:
        assert word in message


def test_the_command_runners_env_is_read_from_the_subagents_settings(tmp_path: Path) -> None:
    from actors.subagents.runners import command_env

    s = load_settings(write(tmp_path, {"subagents": {"runners": {"command": {
        "template": "claude -p {brief}", "env": ["ANTHROPIC_API_KEY"]}}}}))
    assert command_env(s.subagents) == (("ANTHROPIC_API_KEY", None),)
    assert command_env({}) == () and command_env({"runners": {"command": {"env": None}}}) == ()
