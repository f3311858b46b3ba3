"""The UI's modules on their own, in the browser: imported by the page, fed frames, their DOM read back.

Faster and more exact than driving a daemon for each rule: what the stream
reader drops as already shown, what a resync resets, how the conversation
merges chunks, updates a tool card in place and bounds itself.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.sync_daemon import Daemon

pytest.importorskip("playwright.sync_api", reason="playwright drives the browser tests")


@pytest.fixture
def modules(page: Any, daemons: Any) -> Any:
    """A page of the daemon's origin (the login form: no token), from which the modules are imported."""
    daemon: Daemon = daemons().start([])
    page.goto(daemon.url + "/")
    page.get_by_role("textbox", name="Token").wait_for()
    return page


def frame(kind: str, event_id: int | None = None, **data: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"type": kind, "data": data}
    if event_id is not None:
        out["id"] = event_id
    return out


def chunk(text: str, kind: str = "agent_message_chunk") -> dict[str, Any]:
    return {"sessionUpdate": kind, "content": {"type": "text", "text": text}}


def test_the_stream_drops_what_it_has_shown_and_a_resync_starts_over(modules):
    blocks = [
        "id: 1\nevent: session_update\ndata: " + '{"id":1,"type":"session_update","data":{}}',
        "id: 2\ndata: " + '{"id":2,"type":"session_update","data":{}}',
        ": keepalive",
        "retry: 3000",
        "id: 2\ndata: " + '{"id":2,"type":"session_update","data":{}}',  # a replay overlapping what was read
        "data: " + '{"type":"replay_complete","data":{}}',
        "data: " + '{"type":"state_resync_required","data":{"reason":"epoch_reset"}}',
        "id: 1\ndata: " + '{"id":1,"type":"session_update","data":{}}',  # the new epoch counts from 1
        "id: 3\ndata: " + '{"id":3,"type":"session_closed","data":{"reason":"closed"}}',
    ]
    seen = modules.evaluate("""async (blocks) => {
        const { SessionStream } = await import('/ui/stream.js');
        const seen = [];
        const stream = new SessionStream('s', {
            frame: (f) => seen.push(['frame', f.id]), resync: () => seen.push(['resync']),
            replayed: () => seen.push(['replayed']), state: () => {}, unauthorized: () => {}, gone: async () => false,
        });
        const results = blocks.map((b) => stream.deliver(b));
        return { seen, results, lastId: stream.lastId };
    }""", blocks)
    assert seen["seen"] == [["frame", 1], ["frame", 2], ["replayed"], ["resync"], ["frame", 1], ["frame", 3]]
    assert seen["results"][-1] == "closed" and seen["lastId"] == 3


def test_chunks_merge_a_tool_card_updates_in_place_and_text_is_never_markup(modules):
    frames = [
        frame("session_update", update=chunk("Hel")),
        frame("session_update", update=chunk("lo <b>there</b>")),
        frame("session_update", update=chunk("hmm", "agent_thought_chunk")),
        frame("session_update", update={"sessionUpdate": "tool_call", "toolCallId": "c1", "status": "in_progress",
                                        "title": "shell", "kind": "execute", "rawInput": {"command": "ls"}}),
        frame("session_update", update={"sessionUpdate": "tool_call_update", "toolCallId": "c1", "status": "completed",
                                        "content": [{"type": "content", "content": {"type": "text", "text": "a\nb"}}]}),
        frame("session_update", update=chunk("after")),
    ]
    shown = modules.evaluate("""async (frames) => {
        const { Conversation } = await import('/ui/view.js');
        const log = document.createElement('div');
        const view = new Conversation(log);
        frames.forEach((f) => view.feed(f));
        view.flush();  // the open answer is rendered once per animation frame
        return [...log.children].map((n) => [n.className, n.textContent, n.querySelectorAll('b').length]);
    }""", frames)
    assert shown == [
        ["msg agent md", "Hello <b>there</b>", 0],
        ["msg thought", "hmm", 0],
        ["tool", "shellexecutecompletedlsa\nb", 0],
        ["msg agent md", "after", 0],
    ]


def test_a_tool_card_still_running_when_its_turn_ends_says_it_did_not_finish(modules):
    """A cancel or a daemon restart can end a turn with no last update of its call: the card must not stay
    "in_progress" under the turn's end."""
    frames = [
        {**frame("session_update", update={"sessionUpdate": "tool_call", "toolCallId": "c1", "status": "in_progress",
                                           "title": "shell", "kind": "execute"}), "promptId": "p1"},
        {**frame("session_update", update={"sessionUpdate": "tool_call", "toolCallId": "c2", "status": "in_progress",
                                           "title": "read_file", "kind": "read"}), "promptId": "p1"},
        {**frame("session_update", update={"sessionUpdate": "tool_call_update", "toolCallId": "c2",
                                           "status": "completed"}), "promptId": "p1"},
        {**frame("turn_complete", stopReason="cancelled", promptId="p1"), "promptId": "p1"},
    ]
    shown = modules.evaluate("""async (frames) => {
        const { Conversation } = await import('/ui/view.js');
        const log = document.createElement('div');
        const view = new Conversation(log);
        frames.forEach((f) => view.feed(f));
        return [...log.querySelectorAll('.tool')].map((n) => [n.dataset.status, n.querySelector('.badge').textContent]);
    }""", frames)
    assert shown == [["unfinished", "not finished (turn cancelled)"], ["completed", "completed"]]


def test_the_conversation_keeps_its_newest_entries_and_counts_the_rest(modules):
    shown = modules.evaluate("""async () => {
        const { Conversation, MAX_ENTRIES } = await import('/ui/view.js');
        const log = document.createElement('div');
        const view = new Conversation(log);
        for (let i = 0; i < MAX_ENTRIES + 150; i += 1) view.feed({ type: 'turn_error', data: { message: `m${i}`, code: 'x' } });
        return { max: MAX_ENTRIES, count: log.childElementCount, first: log.firstElementChild.textContent,
                 second: log.children[1].textContent, last: log.lastElementChild.textContent };
    }""")
    assert shown["count"] == shown["max"] + 1  # the entries kept, and the line counting the others
    assert shown["first"].startswith("… 150 earlier entries are no longer shown")
    assert shown["second"] == "✗ turn failed: m150 [x]"
    assert shown["last"] == f"✗ turn failed: m{shown['max'] + 149} [x]"


def test_the_running_turn_is_followed_and_ended_ids_are_bounded(modules):
    states = modules.evaluate("""async () => {
        const { Work, RecentSet } = await import('/ui/panels.js');
        const out = [];
        const work = new Work(() => out.push(work.running));
        work.feed({ type: 'pending_prompt_started', promptId: 'p1', data: {} });
        work.feed({ type: 'session_update', promptId: 'p1', data: {} });
        work.feed({ type: 'turn_complete', promptId: 'p1', data: {} });
        work.feed({ type: 'session_update', promptId: 'p1', data: {} });  // a late frame of an ended turn
        work.snapshot({ state: 'running', currentPromptId: null });  // an automatic turn
        work.feed({ type: 'turn_complete', data: {} });
        const recent = new RecentSet(3);
        ['a', 'b', 'c', 'd'].forEach((x) => recent.add(x));
        return { out, size: recent.size, forgot: recent.has('a'), kept: recent.has('d') };
    }""")
    assert states == {"out": ["p1", None, "work", None], "size": 3, "forgot": False, "kept": True}


def test_a_queued_prompt_removed_before_it_ran_ends_no_turn_on_the_page(modules):
    shown = modules.evaluate("""async () => {
        const { Conversation } = await import('/ui/view.js');
        const log = document.createElement('div');
        const view = new Conversation(log);
        const feed = (type, promptId, data = {}) => view.feed({ type, promptId, data });
        feed('pending_prompt_added', 'p2', { text: 'later' });
        feed('pending_prompt_completed', 'p2', { state: 'removed' });
        feed('turn_complete', 'p2', { stopReason: 'cancelled' });  // the removed one's end
        feed('pending_prompt_added', 'p3', { text: 'waited' });
        feed('pending_prompt_started', 'p3');
        feed('turn_complete', 'p3', { stopReason: 'cancelled' });  // one that ran, then was cancelled
        feed('turn_complete', 'p4', { stopReason: 'end_turn' });  // never queued: ran at once
        return [...log.children].map((n) => n.textContent);
    }""")
    assert shown == ["✗ turn cancelled", "✓ turn complete"]


def test_an_edits_diff_shows_its_changed_lines(modules):
    shown = modules.evaluate("""async () => {
        const { toolOutput } = await import('/ui/dom.js');
        return [
            toolOutput([{ type: 'content', content: { type: 'text', text: 'Edited a.py.\\n' } },
                        { type: 'diff', path: '/w/a.py', oldText: 'one\\ntwo\\nthree\\n', newText: 'one\\n2\\nthree\\n' }]),
            toolOutput([{ type: 'diff', path: '/w/new.md', oldText: null, newText: '# Notes' }]),
        ];
    }""")
    assert shown == ["Edited a.py.\n--- /w/a.py (from line 2)\n- two\n+ 2", "--- /w/new.md (new file)\n+ # Notes"]


def test_characters_that_hide_or_reorder_text_are_shown_by_their_code(modules):
    shown = modules.evaluate("""async () => {
        const { visible } = await import('/ui/dom.js');
        return ['a\u202eb', 'c\u200fd', 'e\u061cf', 'g\u2028h', 'i\u2029j', 'k\u2066l', 'm\u001bn', 'tab\tok'].map(visible);
    }""")
    assert shown == ["a⟨U+202E⟩b", "c⟨U+200F⟩d", "e⟨U+61C⟩f", "g⟨U+2028⟩h", "i⟨U+2029⟩j", "k⟨U+2066⟩l", "m␛n",
                     "tab\tok"]


def test_a_snapshot_asked_for_before_frames_that_came_meanwhile_does_not_drop_them(modules):
    """The queue and the permission requests are asked of the daemon after a replay; frames that arrive before
    the answers are applied again on top of them (the answers were made before those frames)."""
    shown = modules.evaluate("""async () => {
        const { PendingPrompts, Permissions } = await import('/ui/panels.js');
        const list = document.createElement('ul');
        document.createElement('section').append(list);  // a list shows its panel's "empty" note
        const pending = new PendingPrompts(list, () => 's');
        pending.feed({ type: 'pending_prompt_added', promptId: 'p1', data: { text: 'one' } });
        pending.asking();
        pending.feed({ type: 'pending_prompt_added', promptId: 'p2', data: { text: 'two' } });
        pending.feed({ type: 'pending_prompt_started', promptId: 'p1', data: {} });
        pending.snapshot([{ promptId: 'p1', state: 'queued', text: 'one' }]);  // made before both frames
        const permissions = new Permissions(document.createElement('div'), () => 's');
        permissions.asking();
        permissions.feed({ type: 'permission_request', data: { requestId: 'r1', options: [] } });
        permissions.snapshot([]);  // made before the request
        permissions.feed({ type: 'permission_request', data: { requestId: 'r2', options: [] } });
        permissions.snapshot(['r1']);  // not asked again: r2, unknown to it, goes
        return { pending: [...pending.items.keys()], permissions: [...permissions.items.keys()],
                 asking: [pending.since, permissions.since] };
    }""")
    assert shown == {"pending": ["p2"], "permissions": ["r1"], "asking": [None, None]}


def test_a_stale_queue_answer_does_not_bring_back_a_prompt_seen_to_leave(modules):
    """Two refreshes overlap: the second's ``asking`` takes the frames the first collected, and the first answer
    (made before an abort) lands after them. A prompt the page saw leave must stay gone: the browser test that
    aborts a queued prompt failed now and then with it listed again."""
    shown = modules.evaluate("""async () => {
        const { PendingPrompts } = await import('/ui/panels.js');
        const list = document.createElement('ul');
        document.createElement('section').append(list);
        const pending = new PendingPrompts(list, () => 's');
        pending.feed({ type: 'pending_prompt_added', promptId: 'p2', data: { text: 'next please' } });
        pending.asking();  // refresh A
        pending.asking();  // refresh B, before A's answer
        pending.feed({ type: 'pending_prompt_completed', promptId: 'p2', data: {} });  // aborted
        pending.snapshot([]);  // B's answer, made after the abort
        pending.snapshot([{ promptId: 'p2', state: 'queued', text: 'next please' }]);  // A's, made before it
        return [...pending.items.keys()];
    }""")
    assert shown == []


def test_a_status_made_before_a_frame_moved_the_turn_on_does_not_move_it_back(modules):
    states = modules.evaluate("""async () => {
        const { Work } = await import('/ui/panels.js');
        const out = [];
        const work = new Work(() => out.push(work.running));
        work.asking();
        work.feed({ type: 'pending_prompt_started', promptId: 'p1', data: {} });
        work.snapshot({ state: 'idle' });  // made before p1 started: not believed
        work.asking();
        work.snapshot({ state: 'running', currentPromptId: 'p1' });  // nothing since: agrees
        work.asking();
        work.snapshot({ state: 'idle' });  // nothing since: believed (p1 ended while the page was away)
        return out;
    }""")
    assert states == ["p1", None]
