"""Red team, fifth round: a session id that names another session's files.

A session's files are its id and a suffix: ``<id>.jsonl`` (the transcript), ``<id>.journal.jsonl``,
``<id>.replay.jsonl``, ``<id>.session.json`` in ``<state>/sessions``. Session ids could contain dots, so the
transcript of session ``<sid>.journal`` was session ``<sid>``'s journal, and ``.replay`` the same:
``POST /sessions/delete {"sessionIds": ["<sid>.journal", "<sid>.replay"]}``, ids nobody made, answered
``removed`` and deleted the live session's journal; ``POST /session {"sessionId": "<sid>.journal"}`` "restored"
that journal as a conversation, ``GET /session/<sid>.journal/transcript`` read it, and the new session's prompts
were appended to it.

A session id now has no dot (:func:`actors.session.transcript.is_safe_session_id`). Every suffix starts with
one, so an id is all of a file name before its first dot and two ids never name one file, whatever suffixes
there are; the daemon refuses a dotted id as ``invalid_session_id`` (400, ``$.sessionId``) and the store will not
name a file by one. The tests below find the suffixes by having the stores write a session's files, not from a
list kept here, and fail on the code before the fix (the aliases were valid ids; the daemon deleted the journal
and created the alias session).
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
import trio

from actors.checkpoints import Store as CheckpointStore
from actors.ids import CountingIds, IdSource
from actors.model import ChatMessage
from actors.process.sandbox import make_home
from actors.replay.recording import HexCountingIds
from actors.session.transcript import is_safe_session_id
from actors.storage import LocalStore
from tests.e2e.isolation_harness import Running, hostile_daemon

ANSWERS = [[{"text": "first answer"}], [{"text": "second answer"}], [{"text": "third answer"}]]


def suffixes_by_directory(root: Path) -> dict[str, set[str]]:
    """Each directory under a state directory where a session's files go, and the suffixes after the id there:
    found by having session ``s`` write every file the stores and the sandbox name after a session."""
    sid = "s"
    store = LocalStore(root, fsync="never")
    store.transcript(sid).append(ChatMessage("user", "hi"))
    store.journal_append(sid, {"op": "prompt"}, durable=False)
    store.record_write(sid, {"cwd": "/"})
    store.replay_append(sid, [{"type": "x"}])
    store.close(sid)
    checkpoints = CheckpointStore(root / "checkpoints", fsync=False)
    checkpoints.write_log(sid, {})
    home = Path(make_home(str(root), sid))
    out: dict[str, set[str]] = {}
    for directory in (store.directory, checkpoints.sessions, home.parent):
        names = [n for n in os.listdir(directory) if n.startswith(sid)]
        out[str(directory.relative_to(root))] = {n[len(sid):] for n in names}
    assert out["sessions"] and all(out.values()), out
    return out


def aliases_of(victim: str, suffixes: set[str]) -> set[str]:
    """The ids whose file would be one of ``victim``'s: ``victim + p`` wherever one suffix is ``p`` + another."""
    return {victim + longer[: len(longer) - len(shorter)]
            for longer in suffixes for shorter in suffixes
            if longer != shorter and longer.endswith(shorter)}


def dotted_ids(victim: str, suffixes: set[str]) -> list[str]:
    """The aliases, and ``victim`` with each dotted part of a suffix (``.journal``, ``.session``, ...)."""
    parts = {"." + part for s in suffixes for part in s.split(".") if part}
    return sorted(aliases_of(victim, suffixes) | {victim + p for p in parts})


# ----------------------------------------------------------------- the id rule


def test_no_session_id_names_a_file_of_another_session(tmp_path):
    found = suffixes_by_directory(tmp_path)
    victim = IdSource().new("session")
    aliases = aliases_of(victim, found["sessions"])
    assert f"{victim}.journal" in aliases and f"{victim}.replay" in aliases  # the red team's two
    for directory, suffixes in found.items():
        for alias in sorted(aliases_of(victim, suffixes)):
            assert not is_safe_session_id(alias), f"{alias!r} names a file of {victim!r} in {directory}"
        # By construction: a suffix starts with a dot and an id has none, so a name splits one way only.
        assert all(s == "" or s.startswith(".") for s in suffixes), (directory, suffixes)
    for dotted in ("a.b", "x.", ".x", ".", "..", f"{victim}.jsonl", f"{victim}.session", "a..b"):
        assert not is_safe_session_id(dotted), dotted
    # What the store names files by is exactly what it lists back.
    from actors.storage.local import SUFFIXES, session_of
    assert set(SUFFIXES) == found["sessions"]
    for suffix in SUFFIXES:
        assert session_of(victim + suffix) == victim
        for alias in aliases_of(victim, found["sessions"]):
            assert session_of(alias + suffix) in (None, victim)


def test_every_id_the_daemon_or_qwen_makes_is_still_a_session_id():
    counting, hex_counting = CountingIds(), HexCountingIds()
    minted = [IdSource().new("session"), counting.new("session"), counting.new("session"),
              hex_counting.new("session"), str(uuid.uuid4()), "session-" + uuid.uuid4().hex, "A_b-9", "x" * 128]
    for sid in minted:
        assert is_safe_session_id(sid), sid
    for bad in ("", "x" * 129, "a/b", "a b", "abc\n", "é"):
        assert not is_safe_session_id(bad), bad


def test_the_store_never_acts_on_another_sessions_files_through_an_alias(tmp_path):
    store = LocalStore(tmp_path, fsync="never")
    victim = "session-0123456789abcdef"
    store.transcript(victim).append(ChatMessage("user", "victim prompt"))
    store.journal_append(victim, {"op": "prompt", "promptId": "p1"})
    store.record_write(victim, {"cwd": "/"})
    store.replay_append(victim, [{"type": "x"}])
    store.close(victim)
    before = {p.name: p.read_bytes() for p in store.directory.iterdir()}
    for alias in dotted_ids(victim, suffixes_by_directory(tmp_path / "derive")["sessions"]):
        try:
            found = store.exists(alias)
        except ValueError:
            found = False
        assert not found, alias
        with contextlib.suppress(ValueError):
            store.delete(alias)
        with contextlib.suppress(ValueError):
            store.journal_append(alias, {"op": "intruder"})
        with contextlib.suppress(ValueError):
            store.transcript(alias).append(ChatMessage("user", "INTRUDER"))
    assert {p.name: p.read_bytes() for p in store.directory.iterdir()} == before
    # A dotted name left on disk (made by a client under the old rule), or a rewrite's temporary file, is
    # no session: listed, it would be an id the daemon refuses.
    for name in ("a.b.jsonl", "a.b.session.json", f".{victim}.jsonl.0a1b2c3d.tmp", "notes.txt"):
        (store.directory / name).write_text("")
    assert store.session_ids() == [victim]


# ----------------------------------------------------------------- against the daemon


async def turn(d: Running, sid: str, text: str) -> dict[str, Any]:
    record = await d.wait_turn(sid, await d.prompt(sid, text))
    assert record["state"] == "completed", record
    return record


def files(d: Running) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in (d.state / "sessions").iterdir() if not p.name.startswith(".")}


def assert_intact(before: dict[str, bytes], after: dict[str, bytes], sid: str) -> None:
    """No file of the victim went, every name there is the victim's, and its logs only grew."""
    assert set(before) <= set(after), f"gone: {sorted(set(before) - set(after))}"
    assert all(name.startswith(sid + ".") for name in after), sorted(after)
    for name, data in before.items():
        if name.endswith(".jsonl"):
            assert after[name].startswith(data), name


async def test_deleting_an_alias_of_a_live_session_deletes_nothing_of_it(tmp_path):
    async with hostile_daemon(tmp_path, ANSWERS) as d:
        sid = await d.open_session()
        await turn(d, sid, "victim prompt")
        await trio.sleep(0.3)  # the replay and record of the turn written
        before = files(d)
        assert f"{sid}.journal.jsonl" in before and f"{sid}.jsonl" in before
        aliases = dotted_ids(sid, suffixes_by_directory(tmp_path / "derive")["sessions"])
        r = await d.client.post("/sessions/delete", json={"sessionIds": aliases})
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["removed"] == [], answer
        refused = {e["sessionId"]: e["code"] for e in answer["errors"]}
        for alias in aliases:  # not a session id, or (at least) no session
            assert refused.get(alias) == "invalid_session_id" or alias in answer["notFound"], (alias, answer)
        assert_intact(before, files(d), sid)
        # The live session still runs prompts, on its whole conversation.
        await turn(d, sid, "victim again")
        transcript = (await d.client.get(f"/session/{sid}/transcript")).json()["entries"]
        said = [r["message"]["content"] for r in transcript if r.get("type") == "message"]
        assert "victim prompt" in said and "victim again" in said and "second answer" in said, said
        listed = {s["sessionId"] for s in (await d.client.get("/session")).json()["sessions"]}
        assert sid in listed and not listed & set(aliases), listed


async def test_starting_a_session_under_an_alias_is_refused_naming_the_field(tmp_path):
    async with hostile_daemon(tmp_path, ANSWERS) as d:
        sid = await d.open_session()
        await turn(d, sid, "victim prompt")
        await trio.sleep(0.3)
        before = files(d)
        for alias in dotted_ids(sid, suffixes_by_directory(tmp_path / "derive")["sessions"]):
            r = await d.client.post("/session", json={"sessionId": alias})
            assert r.status_code == 400, (alias, r.status_code, r.text)
            error = r.json()
            assert error["code"] == "invalid_session_id" and error["path"] == "$.sessionId", error
            assert alias in error["error"], error
            r = await d.client.post(f"/session/{sid}/fork", json={"sessionId": alias})
            assert r.status_code == 400 and r.json()["path"] == "$.sessionId", r.text
            r = await d.client.post(f"/session/{alias}/load", json={})
            assert r.status_code in (400, 404), r.text
            r = await d.client.get(f"/session/{alias}/transcript")
            assert r.status_code == 404, r.text  # never the victim's journal read as a transcript
        assert_intact(before, files(d), sid)
        await turn(d, sid, "victim again")
        listed = {s["sessionId"] for s in (await d.client.get("/session")).json()["sessions"]}
        assert listed == {sid}, listed


@pytest.mark.parametrize("alias_of", ["journal", "replay"])
async def test_an_alias_session_never_writes_into_the_victims_files(tmp_path, alias_of):
    """The red team's second part: the session ``<sid>.journal`` prompted; its transcript was the victim's journal."""
    async with hostile_daemon(tmp_path, ANSWERS) as d:
        sid = await d.open_session()
        await turn(d, sid, "victim prompt")
        alias = f"{sid}.{alias_of}"
        r = await d.client.post("/session", json={"sessionId": alias})
        assert r.status_code == 400, r.text
        r = await d.client.post(f"/session/{alias}/prompt", json={"prompt": [{"type": "text", "text": "INTRUDER"}]})
        assert r.status_code == 404, r.text
        await trio.sleep(0.3)
        for name, data in files(d).items():
            assert b"INTRUDER" not in data, name
