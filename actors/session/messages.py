"""The messages a session actor answers: each carries its reply, and the handler is synchronous."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from .._actor import Reply

if TYPE_CHECKING:
    from ..model import ChatMessage


@attrs.frozen
class Cancel:
    """Cancel the running work (a user cancellation)."""

    reply: Reply[bool]


@attrs.frozen
class GetStatus:
    reply: Reply[dict[str, Any]]


@attrs.frozen
class Load:
    """Restore the conversation from the transcript on disk (clears guard trust)."""

    reply: Reply[int | str]


@attrs.frozen
class SetApprovalMode:
    mode: str
    reply: Reply[str]


@attrs.frozen
class SetModel:
    """Use another model name; the work chain goes on."""

    model: str
    reply: Reply[str]


@attrs.frozen
class ChangeCwd:
    cwd: str
    reply: Reply[str]


@attrs.frozen
class Rewind:
    """Keep the conversation before user turn ``turn`` (counted from 0); clears guard trust."""

    turn: int
    reply: Reply[int | str]


@attrs.frozen
class Snapshot:
    """A copy of the conversation, for a fork; the fork clears this session's trust too."""

    reply: Reply[list[ChatMessage]]


@attrs.frozen
class Vote:
    """A client's answer to a permission request."""

    request_id: str
    outcome: str
    option_id: str | None
    reply: Reply[bool | str]


@attrs.frozen
class ReleaseQueuedPromptWait:
    """A bridge says the queued prompt the guard yielded to is gone (``craft/todoStopGuardQueueReleased``)."""

    reply: Reply[bool]


@attrs.frozen
class KillTask:
    """Stop one background task (a shell's process group, a monitor, a timer), as the ``kill_task`` tool does."""

    task_id: str
    reply: Reply[bool]


@attrs.frozen
class AddTools:
    """Offer the model more tools (a child session's signal tools); the reply is why not, or ``None``."""

    tools: tuple[Any, ...]
    reply: Reply[str | None]


@attrs.frozen
class AddMcpServers:
    """Start a client's MCP servers (those the session has none of that name of yet); the reply names them."""

    servers: tuple[Any, ...]
    reply: Reply[list[str]]


@attrs.frozen
class TurnOffGuard:
    """No Todo Stop Guard in this session (a subagent's child); the reply is why not, or ``None``."""

    reply: Reply[str | None]


@attrs.frozen
class LendDrainSource:
    """A bridge answers mid-turn drains from now on (``None``: the session's own FIFO again). With ``replacing``
    given, only if that is the current source, so one bridge never removes another's."""

    source: Any
    replacing: Any
    reply: Reply[bool]


@attrs.frozen
class LendClientServices:
    """A client lends its files and terminal (``None``: local again); ``replacing`` as for :class:`LendDrainSource`."""

    services: Any
    replacing: Any
    reply: Reply[bool]


@attrs.frozen
class SessionRecord:
    """The session record as it stands (:meth:`Session.record`)."""

    reply: Reply[dict[str, Any]]


@attrs.frozen
class SetTitle:
    """Give the session a title (``None``: none); the reply is the title it has after."""

    title: str | None
    reply: Reply[str | None]


@attrs.frozen
class PendingPermissions:
    """The ids of the permission requests waiting for a vote."""

    reply: Reply[list[str]]


@attrs.frozen
class PermissionEnded:
    """How a permission request that is no longer pending ended, if the session remembers it."""

    request_id: str
    reply: Reply[str | None]


@attrs.frozen
class PermissionRules:
    """The permission rules in force: the settings file's and the session's own."""

    reply: Reply[dict[str, Any]]


@attrs.frozen
class EditPermissionRule:
    """Add (``add``) or remove one of the session's own rules; the reply is whether that changed anything,
    or why the rule cannot be read."""

    effect: str
    rule: str
    add: bool
    reply: Reply[bool | str]


@attrs.frozen
class ExplainPermission:
    """What would happen to a call of ``tool`` with ``arguments`` now, and why (an unknown tool: a str)."""

    tool: str
    arguments: Any
    reply: Reply[dict[str, Any] | str]


@attrs.frozen
class CheckpointCall:
    """A checkpoint operation (actors.checkpoints): ``op`` is ``list``, ``diff`` (of ``turn``), ``rewind`` (to
    ``turn``, files and conversation) or ``undo`` (``undo_id``). Answered with the result, or a
    ``CheckpointRefused``, once the operation (in a task of the session's) is done."""

    op: str
    turn: int | None
    undo_id: str | None
    force: bool
    reply: Reply[Any]


NOT_REPLACING = object()  # a lend that replaces whatever is there

SessionMessage = (Cancel | GetStatus | Load | SetApprovalMode | SetModel | ChangeCwd | Rewind | Snapshot | Vote
                  | ReleaseQueuedPromptWait | KillTask | AddTools | AddMcpServers | TurnOffGuard | LendDrainSource
                  | LendClientServices | SessionRecord | PendingPermissions | PermissionEnded | SetTitle | PermissionRules
                  | EditPermissionRule | ExplainPermission | CheckpointCall)
