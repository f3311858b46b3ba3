"""The public face of a running session: every call that reads or changes it is a message to one of its actors.

Three things are read without a message, as snapshots: :meth:`SessionHandle.summary` (a listing of many
sessions must not wait on each of them), what a loading client is shown first
(:meth:`SessionHandle.load_replay`) and the transcript on disk. Subscriptions are the session's
event bus's own (:mod:`actors.events`).
"""

from __future__ import annotations

from typing import Any

from .. import wire
from ..events import Subscription
from . import fifo as f
from ..settings import APPROVAL_MODES
from .images import accepts_images, prompt_images
from .transcript import TranscriptError
from .persistence import load_replay
from .messages import (
    NOT_REPLACING, AddMcpServers, AddTools, Cancel, ChangeCwd, GetStatus, KillTask, LendClientServices, LendDrainSource, Load,
    CheckpointCall, PendingPermissions, PermissionEnded, ReleaseQueuedPromptWait, Rewind, SessionRecord, SetApprovalMode,
    SetModel, SetTitle, Snapshot, TurnOffGuard, Vote, PermissionRules, EditPermissionRule, ExplainPermission,
)
from ..permission_rules import EFFECTS, parse_rule

ASK_TIMEOUT = 10.0
CHECKPOINT_TIMEOUT = 600.0  # a restore walks and writes a whole tree
KILL_TIMEOUT = 30.0


class SessionHandle:
    """Talk to a live session: submit prompts, steer them, read state, subscribe to events."""

    def __init__(self, session: Any) -> None:
        # The actor itself, for the daemon that supervises it, the replay library and white-box tests;
        # nothing below reads it.
        self._session = session
        assert session.ref is not None and session.fifo_ref is not None
        self._ref = session.ref
        self._fifo = session.fifo_ref
        self._bus = session.bus
        self.session_id: str = session.session_id
        self.created_at: int = session.created_at
        self._summary = session.summary
        self._transcript = session.conversation.transcript
        self._provider = session.runtime.provider
        self._resolve_cwd = session.runtime.resolve_cwd
        self._subscriber_queue = session.runtime.settings.limits.subscriber_queue

    @property
    def cwd(self) -> str:
        return self._summary()["cwd"]

    @property
    def epoch(self) -> str:
        return self._bus.epoch

    @property
    def last_event_id(self) -> int:
        return self._bus.last_event_id

    @property
    def subscriber_count(self) -> int:
        """Its event streams open now (a snapshot, read without a message)."""
        return self._bus.subscriber_count

    def summary(self) -> dict[str, Any]:
        """What ``GET /session`` lists of a live session (a snapshot, read without a message)."""
        return self._summary()

    async def prompt(self, body: wire.PromptBody | str, *, client_id: str | None = None) -> f.Admitted | f.QueueFull | f.StorageUnavailable:
        """Admit a prompt to the FIFO. Returns at admission; the turn runs on its own.

        Raises :class:`~.images.ImageRefused` for image blocks the model cannot take (before anything is queued).
        """
        if isinstance(body, str):
            body = wire.PromptBody(prompt=[wire.TextBlock(type="text", text=body)])
        prompt_images(body, accepts_images(self._provider))
        return await self._fifo.ask(lambda r: f.Admit(body, client_id, r), ASK_TIMEOUT)

    async def take_inbox(self, take: Any) -> int:
        """Queue the prompts another node admitted for this session (cluster mode): ``take()`` moves them
        into the journal and returns their records; returns how many joined the queue."""
        return await self._fifo.ask(lambda r: f.TakeInbox(take, r), ASK_TIMEOUT)

    async def abort_prompt(self, prompt_id: str) -> bool:
        """Abort a queued or running prompt; ``False`` if it is unknown or already settled."""
        return await self._fifo.ask(lambda r: f.Abort(prompt_id, r), ASK_TIMEOUT)

    async def post_mid_turn_message(self, text: str, message_id: str | None = None, *,
                                    client_id: str | None = None) -> dict[str, Any]:
        """Queue user input for the running turn: ``{accepted, messageId}`` or ``{accepted: False, reason}``.
        ``client_id``: the sender's ``X-Qwen-Client-Id`` (its ``pending_prompt_*`` events' originator)."""
        return await self._fifo.ask(lambda r: f.PostMidTurn(text, message_id, r, client_id), ASK_TIMEOUT)

    async def cancel(self) -> bool:
        """Cancel the running work, as a user cancellation."""
        return await self._ref.ask(Cancel, ASK_TIMEOUT)

    async def kill_task(self, task_id: str) -> bool:
        """Stop one of the session's background tasks (a shell's whole process group, a monitor, a timer),
        as the ``kill_task`` tool does; ``False`` when there is no such live task."""
        # Longer than the kill's own wait for a process group to go (10 s) and its journal write.
        return await self._ref.ask(lambda r: KillTask(task_id, r), KILL_TIMEOUT)

    async def status(self) -> dict[str, Any]:
        return await self._ref.ask(GetStatus, ASK_TIMEOUT)

    async def set_title(self, title: str | None) -> str | None:
        """Give the session a title (``None`` or blank: none); published as ``session_info_update`` when it
        changes and kept in its record. Returns the title it has now."""
        title = (title or "").strip() or None
        return await self._ref.ask(lambda r: SetTitle(title, r), ASK_TIMEOUT)

    async def record(self) -> dict[str, Any]:
        """The session record as it stands (cwd, approval mode, model, its own system-prompt layers, times)."""
        return await self._ref.ask(SessionRecord, ASK_TIMEOUT)

    async def pending_prompts(self) -> list[dict[str, Any]]:
        return await self._fifo.ask(f.ListPending, ASK_TIMEOUT)

    async def mid_turn_messages(self) -> dict[str, Any]:
        """The mid-turn messages waiting for a tool boundary, and the ids of the last ones taken into a turn
        (``settledMessageIds``) or run as a prompt of their own (``promotedMessageIds``)."""
        return await self._fifo.ask(f.ListMidTurn, ASK_TIMEOUT)

    async def remove_mid_turn_message(self, message_id: str) -> bool | f.StorageUnavailable:
        """Take back a mid-turn message no turn has taken yet; ``False`` when it is not waiting, a
        :class:`~.fifo.StorageUnavailable` when the journal refused the removal (the message stays)."""
        return await self._fifo.ask(lambda r: f.RemoveMidTurn(message_id, r), ASK_TIMEOUT)

    async def turn(self, prompt_id: str) -> dict[str, Any] | None:
        """The record of one prompt's turn (``"current"`` for the running one)."""
        return await self._fifo.ask(lambda r: f.GetTurn(prompt_id, r), ASK_TIMEOUT)

    async def set_approval_mode(self, mode: str) -> str:
        """``default``, ``auto-edit``, ``yolo`` or ``plan``."""
        if mode not in APPROVAL_MODES:
            raise ValueError(f"approval mode must be one of {list(APPROVAL_MODES)}, got {mode!r}")
        return await self._ref.ask(lambda r: SetApprovalMode(mode, r), ASK_TIMEOUT)

    async def set_model(self, model: str) -> str:
        """Use another model name from the next model call on; the work chain goes on."""
        if not model.strip():
            raise ValueError("model must not be empty")
        return await self._ref.ask(lambda r: SetModel(model, r), ASK_TIMEOUT)

    async def change_cwd(self, cwd: str) -> str:
        """Move the session to another existing directory (clears Todo Stop Guard trust).

        ``cwd`` is resolved as at create (:meth:`Runtime.resolve_cwd`); ``InvalidCwd`` when unusable.
        """
        path = self._resolve_cwd(cwd)
        return await self._ref.ask(lambda r: ChangeCwd(path, r), ASK_TIMEOUT)

    async def rewind(self, turn: int) -> int:
        """Drop user turn ``turn`` (from 0) and everything after it; returns the messages kept."""
        answer = await self._ref.ask(lambda r: Rewind(turn, r), ASK_TIMEOUT)
        if isinstance(answer, str):
            raise ValueError(answer)
        return answer

    async def checkpoints(self, op: str, *, turn: int | None = None, undo_id: str | None = None,
                          force: bool = False) -> dict[str, Any]:
        """A checkpoint operation (``list``, ``diff``, ``rewind``, ``undo``: actors.checkpoints); raises
        ``CheckpointRefused`` (its ``code`` is the REST error code)."""
        answer = await self._ref.ask(lambda r: CheckpointCall(op, turn, undo_id, force, r), CHECKPOINT_TIMEOUT)
        if isinstance(answer, Exception):
            raise answer
        return answer

    async def snapshot(self) -> list:
        """A copy of the conversation (for a fork; clears this session's guard trust)."""
        return await self._ref.ask(Snapshot, ASK_TIMEOUT)

    async def release_queued_prompt_wait(self) -> bool:
        """The queued prompt the Todo Stop Guard yielded to was aborted elsewhere (a bridge's queue)."""
        return await self._ref.ask(ReleaseQueuedPromptWait, ASK_TIMEOUT)

    async def set_drain_source(self, source: Any, *, replacing: Any = NOT_REPLACING) -> bool:
        """Let a bridge answer mid-turn drains: ``source(watch_queued_prompt) -> PendingReply[DrainResult]``.

        With ``replacing``, only swap if that is the current source (so one bridge never removes
        another's); ``None`` puts the daemon's own FIFO back. Returns whether it was set.
        """
        return await self._ref.ask(lambda r: LendDrainSource(source, replacing, r), ASK_TIMEOUT)

    async def set_client_services(self, services: Any, *, replacing: Any = NOT_REPLACING) -> bool:
        """Lend the session a client's files and terminal (:class:`~.client.ClientServices`); ``None``: local.

        With ``replacing``, only swap if those are the current ones (so a client that leaves never takes
        back what another lent since). Returns whether it was set. Takes effect from the next tool call.
        """
        return await self._ref.ask(lambda r: LendClientServices(services, replacing, r), ASK_TIMEOUT)

    async def add_tools(self, *tools: Any) -> None:
        """Offer this session's model more tools (a child session's signal tools, say).

        Raises ``ValueError`` for a name already taken: a built-in is never shadowed this way.
        """
        refused = await self._ref.ask(lambda r: AddTools(tools, r), ASK_TIMEOUT)
        if refused is not None:
            raise ValueError(refused)

    async def add_mcp_servers(self, servers: tuple[Any, ...]) -> list[str]:
        """Start a client's MCP servers in this session (those it has none of that name of yet); their names."""
        return await self._ref.ask(lambda r: AddMcpServers(servers, r), ASK_TIMEOUT) if servers else []

    async def turn_off_todo_stop_guard(self) -> None:
        """Run this session without a Todo Stop Guard whatever the settings say (a subagent's child
        session: its goal loop is its continuation). Only before its first prompt."""
        refused = await self._ref.ask(TurnOffGuard, ASK_TIMEOUT)
        if refused is not None:
            raise RuntimeError(refused)

    async def permission_rules(self) -> dict[str, dict[str, list[str]]]:
        """The permission rules in force, by source (``settings``, ``session``) and list (allow, ask, deny)."""
        return await self._ref.ask(PermissionRules, ASK_TIMEOUT)

    async def add_permission_rule(self, effect: str, rule: str) -> bool:
        """Add a rule of the session's own (kept in its record); ``False`` when it has it already.
        ``ValueError`` (``RuleError``) for a rule that cannot be read or an effect that is not one."""
        return await self._edit_rule(effect, rule, add=True)

    async def remove_permission_rule(self, effect: str, rule: str) -> bool:
        """Remove a rule of the session's own; ``False`` when it has no such rule (the settings' stay)."""
        return await self._edit_rule(effect, rule, add=False)

    async def _edit_rule(self, effect: str, rule: str, *, add: bool) -> bool:
        if effect not in EFFECTS:
            raise ValueError(f"effect must be one of {', '.join(EFFECTS)}, got {effect!r}")
        if add:
            parse_rule(rule)  # RuleError, before the session is asked
        answer = await self._ref.ask(lambda r: EditPermissionRule(effect, rule, add, r), ASK_TIMEOUT)
        if isinstance(answer, str):
            raise ValueError(answer)
        return answer

    async def explain_permission(self, tool: str, arguments: Any) -> dict[str, Any]:
        """What would happen to a call of ``tool`` with ``arguments`` now, and why (``LookupError``: no such
        tool in this session)."""
        answer = await self._ref.ask(lambda r: ExplainPermission(tool, arguments, r), ASK_TIMEOUT)
        if isinstance(answer, str):
            raise LookupError(answer)
        return answer

    async def has_permission_request(self, request_id: str) -> bool:
        return request_id in await self._ref.ask(PendingPermissions, ASK_TIMEOUT)

    async def permission_ended(self, request_id: str) -> str | None:
        """How a permission request that is no longer pending ended (``None``: unknown to the session)."""
        return await self._ref.ask(lambda r: PermissionEnded(request_id, r), ASK_TIMEOUT)

    async def vote(self, request_id: str, outcome: str, option_id: str | None = None) -> bool:
        """Answer a permission request; ``False`` when it is unknown or already resolved (first vote wins).

        Raises ``ValueError`` for an option the request did not offer.
        """
        answer = await self._ref.ask(lambda r: Vote(request_id, outcome, option_id, r), ASK_TIMEOUT)
        if isinstance(answer, str):
            raise ValueError(answer)
        return answer

    async def load(self) -> int:
        """Restore the conversation from disk; returns the number of messages restored.

        Raises :class:`TranscriptError` when the file cannot be read back (the session goes on).
        """
        answer = await self._ref.ask(Load, ASK_TIMEOUT)
        if isinstance(answer, str):
            raise TranscriptError(answer)
        return answer

    def load_replay(self, turn_active: bool) -> tuple[list[wire.Event], int]:
        """What a client loading this session is shown first, and the event id its stream goes on after
        (:func:`.persistence.load_replay`): a snapshot, read without a message, like :meth:`summary`."""
        return load_replay(self._bus, turn_active)

    def subscribe(self, last_event_id: int | None = None, epoch: str | None = None,
                  max_queued: int | None = None) -> Subscription:
        """Events: the replay after ``last_event_id`` (if given), then live events."""
        return self._bus.subscribe(last_event_id, epoch, max_queued or self._subscriber_queue)

    def transcript(self) -> list[dict[str, Any]]:
        """The transcript's records, read from disk."""
        return self._transcript.records()
