"""Cursor clients: subscriptions that read, drop and reconnect with ``Last-Event-ID``.

``attach`` subscribes a client that never reads (it only keeps pending permissions alive). A
*cursor* client reads, as an SSE client does:

- ``connect`` subscribes with a cursor — by default the id of the last event this client read
  (its ``Last-Event-ID``), none on its first connection — and starts a reader task that takes each
  frame when the scheduler lets it, ``read_delay`` virtual seconds apart for a slow client;
- ``drop`` is the connection dying: the reader stops where it is (what it had not read is lost
  to it) and the subscription closes. The next ``connect`` asks the bus to replay from there.

When the replay settles (connected clients must have read everything they were sent), each
client's connections are recorded (trace kind ``client``); the invariant
``cursor_replay_equals_live`` then checks that every connection is the live stream from its cursor:
contiguous ids, each event as it was published, one ``replay_complete``, no resync while in the ring.
"""

from __future__ import annotations

from typing import Any

import attrs
import trio

from . import fields as F
from . import jitter as J
from .registry import register_action
from .trace import Trace, fingerprint
from .world import World

CLIENT = F.Field(F.label_text, default="client")


@attrs.define
class Connection:
    gen: int
    cursor: int | None  # the Last-Event-ID it sent (None: live only)
    head: int  # the bus's last id when it connected
    subscription: Any
    scope: trio.CancelScope = attrs.field(factory=trio.CancelScope)
    frames: list[list[Any]] = attrs.field(factory=list)
    done: bool = False
    dropped: bool = False

    def to_trace(self) -> dict[str, Any]:
        return {"gen": self.gen, "cursor": self.cursor, "head": self.head, "dropped": self.dropped,
                "frames": self.frames}


@attrs.define
class CursorClient:
    label: str
    session: str  # the session label
    read_delay: float = 0.0
    last_id: int | None = None  # the id of the last event it read: its Last-Event-ID
    connections: list[Connection] = attrs.field(factory=list)

    @property
    def current(self) -> Connection | None:
        last = self.connections[-1] if self.connections else None
        return last if last is not None and not last.done else None

    @property
    def caught_up(self) -> bool:
        """Connected clients have read every frame they were sent (the replay waits for them)."""
        current = self.current
        return current is None or current.subscription.queued == 0


async def _read(client: CursorClient, connection: Connection) -> None:
    with connection.scope:
        async for event in connection.subscription:
            if event.id is None:  # a synthetic frame: replay_complete, state_resync_required, ...
                connection.frames.append([None, event.type])
            else:
                connection.frames.append([event.id, fingerprint(event.type, event.prompt_id, event.data)])
                client.last_id = event.id
            if client.read_delay:
                await trio.sleep(client.read_delay)
    connection.done = True


def _cursor(value: Any, where: str, ctx: F.ParseContext) -> int | str:
    if value == "last":
        return value
    return F.count(value, where, ctx)


@register_action("connect", session=F.SESSION, client=CLIENT, last_event_id=F.Field(_cursor, default="last"),
                 read_delay=F.Field(J.seconds, default=0.0))
async def connect(world: World, args: dict[str, Any]) -> Any:
    """A reading client subscribes with ``Last-Event-ID``: ``last`` (default) is the id of the last
    event it read (none on its first connection), or a number; ``read_delay`` makes it a slow reader.
    ``{lastEventId, replayed}``: the cursor it sent and how many frames the replay queued."""
    label, session = args["client"], args["session"]
    client = world.cursors.get(label)
    if client is None:
        client = world.cursors[label] = CursorClient(label, session, args["read_delay"])
    elif client.current is not None:
        raise ValueError(f"client {label!r} is already connected")
    elif client.session != session:
        raise ValueError(f"client {label!r} reads session {client.session!r}, not {session!r}")
    client.read_delay = args["read_delay"]
    cursor = client.last_id if args["last_event_id"] == "last" else args["last_event_id"]
    slot = world.sessions[session]
    handle = slot.handle
    # Deep enough never to evict in a replay; a slow reader is a matter of read_delay, not of the cap.
    subscription = handle.subscribe(last_event_id=cursor, max_queued=1 << 30)
    connection = Connection(slot.gen, cursor, handle.last_event_id, subscription)
    client.connections.append(connection)
    world.spawn(_read, client, connection, name=f"client {label}")
    return {"lastEventId": cursor, "replayed": subscription.queued}


@register_action("drop", client=F.Field(F.label_text, default="client"))
async def drop(world: World, args: dict[str, Any]) -> Any:
    """The client's connection dies: its reader stops at once (unread frames are lost to it) and the
    subscription closes. ``{lastEventId, read}``: where a reconnect resumes, and the frames it read."""
    client = world.cursors.get(args["client"])
    connection = client.current if client is not None else None
    if client is None or connection is None:
        raise ValueError(f"client {args['client']!r} is not connected")
    connection.scope.cancel()
    connection.subscription.close()
    connection.done = connection.dropped = True
    return {"lastEventId": client.last_id, "read": len(connection.frames)}


def record_clients(world: World, trace: Trace) -> None:
    """Each cursor client's connections, once the replay settled."""
    for label, client in world.cursors.items():
        slot = world.sessions.get(client.session)
        live_last = slot.handle.last_event_id if slot is not None else None
        trace.client(label, client.session, [c.to_trace() for c in client.connections], live_last)
