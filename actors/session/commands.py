"""Slash commands: a prompt whose whole text is ``/compact``, ``/clear`` or ``/model <name>``.

Such a prompt is admitted and queued like any other (so it runs after the work
before it, and over REST and ACP alike), but when its turn starts the session
runs the command instead of calling the model: the answer is one
``agent_message_chunk`` and the turn ends ``end_turn``. The command's text is
never added to the conversation. A ``/word`` that names no command here is
ordinary text for the model (a path like ``/etc/hosts`` stays a question).

- ``/compact``: summarise the older conversation with one model call, as the
  context keeper does when the window fills (:meth:`ContextKeeper.summarise`).
- ``/clear``: drop the whole conversation; like a rewind it clears the Todo
  Stop Guard's trust.
- ``/model <name>``: use another model name from the next model call on (as
  ``POST /session/:id/model``).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import attrs

from .. import wire

if TYPE_CHECKING:
    from .ports import TurnPorts
    from .turn_state import TurnState

# (name, description, input hint or None): what ACP's available_commands_update lists.
COMMANDS: tuple[tuple[str, str, str | None], ...] = (
    ("compact", "Summarise the conversation so far, to free the model's context", None),
    ("clear", "Drop the conversation history and start afresh in this session", None),
    ("model", "Use another model from the next request on", "model name"),
)
NAMES = frozenset(name for name, _, _ in COMMANDS)
_COMMAND = re.compile(r"/([a-z][a-z0-9_-]*)(?:[ \t]+(.*))?", re.DOTALL)
MAX_MODEL_CHARS = 200


@attrs.frozen
class SlashCommand:
    name: str
    argument: str  # the rest of the line, stripped; "" when none


def parse(text: str) -> SlashCommand | None:
    """The command ``text`` is, or ``None`` when it is ordinary text for the model.

    Only the whole prompt is a command (surrounding whitespace aside), and only a name in :data:`NAMES`.
    """
    match = _COMMAND.fullmatch(text.strip())
    if match is None or match.group(1) not in NAMES:
        return None
    return SlashCommand(match.group(1), (match.group(2) or "").strip())


def available_commands() -> list[dict[str, Any]]:
    """ACP ``AvailableCommand`` objects for the commands above."""
    out: list[dict[str, Any]] = []
    for name, description, hint in COMMANDS:
        command: dict[str, Any] = {"name": name, "description": description}
        if hint is not None:
            command["input"] = {"hint": hint}
        out.append(command)
    return out


def available_commands_update() -> dict[str, Any]:
    """The ``available_commands_update`` session update."""
    return {"sessionUpdate": "available_commands_update", "availableCommands": available_commands()}


async def run(ports: TurnPorts, turn: TurnState, command: SlashCommand) -> None:
    """Run ``command`` as the turn's whole work and publish its answer."""
    if command.name == "clear":
        text = _clear(ports, command)
    elif command.name == "compact":
        text = await _compact(ports, turn, command)
    else:
        text = await _model(ports, turn, command)
    ports.publisher.update(wire.text_update("agent_message_chunk", text, {"command": command.name}), turn.prompt_id)


def _clear(ports: TurnPorts, command: SlashCommand) -> str:
    if command.argument:
        return "/clear takes no argument; nothing was cleared."
    dropped = len(ports.conversation)
    ports.conversation.replace([])
    # A trust-clearing event, as a rewind is; this very turn is running, so the guard stays off until
    # the next ordinary prompt starts.
    ports.chain.invalidate(turn_running=True)
    return f"Cleared the conversation ({dropped} message{'s' if dropped != 1 else ''})."


async def _compact(ports: TurnPorts, turn: TurnState, command: SlashCommand) -> str:
    if command.argument:
        return "/compact takes no argument; nothing was compacted."
    before = len(ports.conversation)
    if not await ports.context.summarise(turn.prompt_id, turn.usage):
        return ("Nothing was compacted: the conversation is too short to summarise, or the summary "
                "request failed.")
    return f"Compacted the conversation: {before} messages are now {len(ports.conversation)}."


async def _model(ports: TurnPorts, turn: TurnState, command: SlashCommand) -> str:
    name = command.argument
    if not name or len(name) > MAX_MODEL_CHARS or any(c.isspace() for c in name):
        return f"Usage: /model <name> (one word, at most {MAX_MODEL_CHARS} characters); the model is unchanged."
    ports.context.use_model(name)  # as SetModel: no new work chain
    ports.publisher.event("model_switched", wire.model_switched(ports.publisher.session_id, name), turn.prompt_id)
    await ports.save_record()
    return f"Model set to {name}."
