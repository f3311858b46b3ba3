"""The cluster's live events in Redis: one stream per session, one wake-up stream per node.

Keys (Redis is the only place they meet; PostgreSQL holds the record):

    trellis:events:{session_id}   a stream; entry ``N-0`` is the session's event N (so SSE ids stay
                                  decimal); fields ``t`` (type), ``d`` (the event's JSON, exactly
                                  :meth:`Event.json`) and, for a prompt's events, ``p`` (prompt id)
    trellis:owner:{session_id}    the fencing token ``"{node_id}:{epoch}"`` of the node allowed to append
    trellis:wake:{node_id}        a stream of wake-up messages for one node; field ``m``, the message as JSON

Three pieces:

* :class:`RedisEvents`, a thin client. An append is one round trip: a Lua
  script that compares the owner key with the caller's token (a mismatch is
  :class:`StaleOwner` and writes nothing) and adds every entry, trimming to
  about ``max_events``. An id not above the stream's last is skipped, so a
  retry after a timeout is harmless. Connection trouble, timeouts and refusals
  are :class:`EventsUnavailable` naming what was being done.
* :class:`EventPublisher`, one per node: a bus observer calls
  :meth:`~EventPublisher.publish_nowait` (never blocks); its run loop sends
  whatever accumulated for a session in one append, the appends of every
  session with events in one round trip (a pipeline; in a burst, one that
  follows the last at once waits :data:`LINGER` for more), retrying with a
  bounded backoff while Redis is away. Its buffer is bounded: when full the oldest
  events go, and readers see the gap in ids and resync. A stale owner's
  buffer is dropped and ``on_stale`` told once.
* :class:`FanOutReader`, one per node: a single ``XREAD BLOCK`` over the
  node's wake stream and every session stream a local :class:`Follow` is on.
  Follows of one session share one cursor in the XREAD (the lowest of their
  positions; each skips what it already has). A change in the set of streams
  cancels the blocked read and restarts it. Each follow has a bounded queue;
  one that falls ``max_queued`` entries behind is ended with
  :class:`FollowOverflow` (after what it already has), never slowing the
  reader or the other follows. Positions advance only on delivery, so after
  an outage every stream resumes where it stopped: nothing lost, nothing twice.
  Sessions this node owns (:meth:`~FanOutReader.own`) are not read back:
  the publisher hands each append to the reader once Redis acknowledged it
  (:meth:`~FanOutReader.appended`), so a follow still gets only what Redis
  holds (a next owner continues after it), without an XREAD round trip and a
  parse per batch. A follow gets such entries only while they continue its
  position exactly; one that is behind (a gap, a follow from further back)
  has the stream in the XREAD until it caught up.

``open``/``aclose`` (or ``async with``) must happen in one task, which outlives
every use: coredis runs its connections in a task group opened there.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Callable, Iterable, Sequence
from contextlib import AsyncExitStack
from typing import Any, Self

import attrs
import orjson
import trio

from ..wire import Event
from .database import redact

log = logging.getLogger("trellis.cluster.events")

DEFAULT_MAX_EVENTS = 4096
DEFAULT_MAX_BUFFERED = 10_000
DEFAULT_MAX_QUEUED = 1024
DEFAULT_BLOCK_MS = 1000
WAKE_MAXLEN = 1000
MAX_KEPT_WAKES = 1000
MAX_BATCH = 512  # entries per append: the script runs inside Redis and holds it meanwhile
MAX_ROUND = 4 * MAX_BATCH  # entries per round trip of the publisher (its appends to many sessions, pipelined)
LINGER = 0.001  # seconds a round waits for more events when it follows the last one at once (a burst)
READ_COUNT = 512  # entries per stream per XREAD
BACKOFF_MIN, BACKOFF_MAX = 0.05, 2.0


def events_key(session_id: str) -> str:
    return f"trellis:events:{session_id}"


def owner_key(session_id: str) -> str:
    return f"trellis:owner:{session_id}"


def wake_key(node_id: str) -> str:
    return f"trellis:wake:{node_id}"


class EventsUnavailable(OSError):
    """Redis could not be reached, timed out, or refused the command; the message says doing what."""


class StaleOwner(Exception):
    """An append refused: the session's owner key holds another node's (or a newer epoch's) token."""

    def __init__(self, session_id: str, token: str, owner: str | None) -> None:
        super().__init__(f"session {session_id}: token {token!r} is not the owner ({owner or 'no owner'})")
        self.session_id, self.token, self.owner = session_id, token, owner


class FollowOverflow(Exception):
    """A follow fell too far behind and was ended; resume with ``subscribe(session_id, last_id)``."""

    def __init__(self, session_id: str, last_id: int) -> None:
        super().__init__(f"session {session_id}: follow fell behind after event {last_id}")
        self.session_id, self.last_id = session_id, last_id


class _Refused(Exception):
    """The append script's refusal (the owner key holds ``owner``); :class:`StaleOwner` to callers."""

    def __init__(self, owner: str) -> None:
        self.owner = owner


@attrs.frozen
class StreamEvent:
    """One entry of a session's stream."""

    id: int
    type: str
    data: bytes  # the event's JSON, the SSE frame's data
    prompt_id: str | None = None

    def event(self) -> Event:
        return Event.from_dict(orjson.loads(self.data), f"event {self.id}")


def _entry_id(raw: bytes) -> int:
    return int(raw.partition(b"-")[0])


def _id_order(identifier: str) -> tuple[int, int]:
    ms, _, seq = identifier.partition("-")
    return int(ms), int(seq or 0)


def _stream_event(entry: Any) -> StreamEvent:
    """The entry as written by the append script; ``ValueError`` for anything else (see :class:`_Malformed`)."""
    ms, _, seq = entry.identifier.partition(b"-")
    fields = entry.field_values
    kind, data, prompt = fields.get(b"t"), fields.get(b"d"), fields.get(b"p")
    if seq != b"0" or not ms.isdigit() or not isinstance(kind, bytes) or not isinstance(data, bytes):
        raise ValueError("not an entry the append script writes (id N-0, fields t and d)")
    # The data goes out as an SSE frame as it is: it must be one JSON object (orjson writes no raw newline),
    # and the type and prompt id single printable lines, or a frame could be split or made up.
    if not _one_line(kind) or (prompt is not None and not _one_line(prompt)):
        raise ValueError("type or prompt id is not one printable line")
    try:
        if not isinstance(orjson.loads(data), dict):
            raise ValueError("data is not a JSON object")
    except orjson.JSONDecodeError:
        raise ValueError("data is not JSON") from None
    return StreamEvent(int(ms), kind.decode(), bytes(data), prompt.decode() if prompt is not None else None)


def _one_line(raw: Any) -> bool:
    return isinstance(raw, bytes) and raw.isascii() and raw.decode().isprintable()


class _Malformed:
    """Entries of session streams that are not what the append script writes (another writer of the Redis,
    a bug): skipped, never handed to a client nor failing its read; counted, the first logged."""

    def __init__(self) -> None:
        self.count = 0

    def parse(self, session_id: str, entries: Iterable[Any]) -> list[StreamEvent]:
        out = []
        for entry in entries:
            try:
                out.append(_stream_event(entry))
            except (ValueError, AttributeError, TypeError) as exc:
                self.count += 1
                if self.count == 1:
                    log.warning("session %s: skipped a malformed entry %r of its Redis stream (%s); later ones "
                                "are only counted", session_id, getattr(entry, "identifier", "?"), exc)
        return out


# KEYS: stream, owner. ARGV: token, maxlen, then (id, type, data, prompt or "") per entry.
# A refusal is an error reply "STALE <owner>"; otherwise the number of entries added.
_APPEND = """
local owner = redis.call('GET', KEYS[2])
if owner ~= ARGV[1] then
  return redis.error_reply('STALE ' .. (owner or ''))
end
local added = 0
for i = 3, #ARGV, 4 do
  local xadd = {'XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], ARGV[i] .. '-0', 't', ARGV[i + 1], 'd', ARGV[i + 2]}
  if ARGV[i + 3] ~= '' then
    table.insert(xadd, 'p')
    table.insert(xadd, ARGV[i + 3])
  end
  local r = redis.pcall(unpack(xadd))
  if type(r) == 'table' and r.err then
    -- already there (a retry after a lost reply): skip it; anything else is a real error
    if not string.find(r.err, 'equal or smaller', 1, true) then return r end
  else
    added = added + 1
  end
end
return added
"""

Entry = tuple[int, str, bytes] | tuple[int, str, bytes, str | None]


class RedisEvents:
    """A Redis client for the session streams, owner keys and wake streams (``redis://…``)."""

    def __init__(self, url: str, *, max_events: int = DEFAULT_MAX_EVENTS, timeout: float = 5.0) -> None:
        self.where = redact(url)
        self.max_events = max_events
        self.timeout = timeout  # per command (a blocking read: its block time plus this)
        self._url = url
        self.malformed = _Malformed()  # entries skipped on reading (.count)
        self._client: Any = None
        self._script: Any = None
        self._stack: AsyncExitStack | None = None

    async def open(self) -> Self:
        try:
            import coredis
        except ImportError as exc:
            raise EventsUnavailable(f"cluster mode needs coredis: pip install 'trellis[cluster]' "
                                    f"({exc.name} is missing)") from None
        try:
            # decode_components: a user name or password is percent-encoded in a URL, as PostgreSQL's is.
            client = coredis.Redis.from_url(self._url, decode_responses=False, connect_timeout=self.timeout,
                                            decode_components=True)
        except (ValueError, TypeError) as exc:
            raise EventsUnavailable(f"Redis at {self.where}: not a usable URL ({type(exc).__name__})") from None
        stack = AsyncExitStack()
        await stack.enter_async_context(client)
        self._client, self._stack = client, stack
        self._script = client.register_script(_APPEND)
        try:
            await self._run("connecting", client.ping)
        except BaseException:
            await self.aclose()
            raise
        return self

    async def aclose(self) -> None:
        stack, self._stack, self._client = self._stack, None, None
        if stack is not None:
            await stack.aclose()  # no exception passed in: the caller's own exception stays ungrouped

    async def __aenter__(self) -> Self:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def _run(self, doing: str, call: Callable[[], Any], timeout: float | None = None) -> Any:
        from coredis.exceptions import RedisError, ResponseError

        if self._client is None:
            raise EventsUnavailable(f"Redis at {self.where}: {doing}: the client is not open")
        try:
            with trio.fail_after(self.timeout if timeout is None else timeout):
                return await call()
        except trio.TooSlowError:
            raise EventsUnavailable(f"Redis at {self.where}: {doing}: no reply within "
                                    f"{self.timeout if timeout is None else timeout} s") from None
        except ResponseError as exc:
            if str(exc).startswith("STALE"):
                raise _Refused(str(exc)[6:]) from None
            raise EventsUnavailable(f"Redis at {self.where}: {doing}: refused: {exc}") from None
        except (RedisError, OSError) as exc:
            raise EventsUnavailable(f"Redis at {self.where}: {doing}: {exc}") from None

    # -- sessions

    async def set_owner(self, session_id: str, token: str) -> None:
        """Make ``token`` the one allowed to append (at claim time); the previous owner's appends fail."""
        await self._run(f"setting the owner of session {session_id}",
                        lambda: self._client.set(owner_key(session_id), token))

    async def claim_many(self, tokens: dict[str, str]) -> dict[str, int]:
        """:meth:`set_owner` and :meth:`last_id` of many sessions (session id -> token) in one round trip (a
        pipeline); each session's last id."""
        if not tokens:
            return {}

        async def run() -> dict[str, int]:
            async with self._client.pipeline(transaction=False) as pipe:
                sets = [pipe.set(owner_key(s), token) for s, token in tokens.items()]
                tails = {s: pipe.xrevrange(events_key(s), count=1) for s in tokens}
            for done in sets:
                await done
            return {s: _entry_id(got[0].identifier) if (got := await tail) else 0 for s, tail in tails.items()}

        return await self._run(f"setting the owner of {len(tokens)} sessions", run)

    async def append(self, session_id: str, token: str, entries: Sequence[Entry]) -> int:
        """Add ``(id, type, data[, prompt_id])`` entries as ``id-0`` in one round trip; returns how many were new.

        :class:`StaleOwner` (nothing written) unless the owner key holds ``token``.
        Ids not above the stream's last are skipped.
        """
        if not entries:
            return 0
        args = self._append_args(token, entries)
        keys = [events_key(session_id), owner_key(session_id)]
        try:
            added = await self._run(f"appending {len(entries)} events to session {session_id}",
                                    lambda: self._script(keys, args))
        except _Refused as refused:
            raise StaleOwner(session_id, token, refused.owner or None) from None
        return int(added)

    async def append_many(self, batches: Sequence[tuple[str, str, Sequence[Entry]]]) -> list[int | StaleOwner]:
        """:meth:`append` to several sessions (``(session_id, token, entries)`` each) in one round trip, a
        pipeline; per batch, how many entries were new or the :class:`StaleOwner` that refused it."""
        from coredis.exceptions import ResponseError

        async def run() -> list[int | StaleOwner]:
            async with self._client.pipeline(transaction=False, raise_on_error=False) as pipe:
                calls = [self._script([events_key(s), owner_key(s)], self._append_args(token, entries), client=pipe)
                         for s, token, entries in batches]
            out: list[int | StaleOwner] = []
            for (session_id, token, _), call in zip(batches, calls):
                try:
                    out.append(int(await call))
                except ResponseError as exc:
                    if not str(exc).startswith("STALE"):
                        raise  # refused for another reason: EventsUnavailable, as a single append's
                    out.append(StaleOwner(session_id, token, str(exc)[6:] or None))
            return out

        count = sum(len(entries) for _, _, entries in batches)
        return await self._run(f"appending {count} events to {len(batches)} sessions", run)

    def _append_args(self, token: str, entries: Sequence[Entry]) -> list[str | bytes | int]:
        args: list[str | bytes | int] = [token, self.max_events]
        for entry in entries:
            prompt = entry[3] if len(entry) > 3 else None  # type: ignore[misc]
            args += [entry[0], entry[1], entry[2], prompt or ""]
        return args

    async def last_id(self, session_id: str) -> int:
        """The id of the stream's last entry; 0 when it is empty."""
        got = await self._run(f"reading the last event of session {session_id}",
                              lambda: self._client.xrevrange(events_key(session_id), count=1))
        return _entry_id(got[0].identifier) if got else 0

    async def first_id(self, session_id: str) -> int | None:
        """The id of the oldest entry still in the stream (trimming moves it on); ``None`` when empty."""
        got = await self._run(f"reading the first event of session {session_id}",
                              lambda: self._client.xrange(events_key(session_id), count=1))
        return _entry_id(got[0].identifier) if got else None

    async def read_after(self, session_id: str, cursor: int, count: int | None = None) -> list[StreamEvent]:
        """The entries with ids above ``cursor``, in order (at most ``count``)."""
        got = await self._run(f"reading session {session_id} after {cursor}",
                              lambda: self._client.xrange(events_key(session_id), f"({cursor}-0", "+", count))
        return self.malformed.parse(session_id, got)

    async def delete(self, session_id: str) -> None:
        """Remove the session's stream and owner key."""
        await self._run(f"deleting session {session_id}",
                        lambda: self._client.delete([events_key(session_id), owner_key(session_id)]))

    # -- nodes

    async def wake(self, node_id: str, message: dict[str, Any]) -> None:
        """Send ``message`` to node ``node_id``'s wake stream."""
        from coredis import PureToken

        data = orjson.dumps(message)
        await self._run(f"waking node {node_id}", lambda: self._client.xadd(
            wake_key(node_id), {"m": data}, trim_strategy=PureToken.MAXLEN,
            trim_operator=PureToken.APPROXIMATELY, threshold=WAKE_MAXLEN))

    async def wake_tail(self, node_id: str) -> str:
        """The id of the last message in node ``node_id``'s wake stream (``0-0`` when none)."""
        got = await self._run(f"reading the wake stream of node {node_id}",
                              lambda: self._client.xrevrange(wake_key(node_id), count=1))
        return got[0].identifier.decode() if got else "0-0"

    async def read_block(self, streams: dict[str, str], block_ms: int, count: int = READ_COUNT) -> dict[str, Any]:
        """``XREAD BLOCK``: stream key → entries after the id given for it; empty after ``block_ms``."""
        got = await self._run("waiting for events", lambda: self._client.xread(streams, count=count, block=block_ms),
                              timeout=block_ms / 1000 + self.timeout)
        return {k.decode(): v for k, v in (got or {}).items()}


# ----------------------------------------------------------------------------------------- publisher


class EventPublisher:
    """Sends each session's bus events to its stream, in batches, from one task per node."""

    def __init__(self, redis: RedisEvents, *, max_buffered: int = DEFAULT_MAX_BUFFERED,
                 on_stale: Callable[[str], Any] | None = None, max_batch: int = MAX_BATCH,
                 on_appended: Callable[[str, list[Entry]], Any] | None = None) -> None:
        self.redis = redis
        self.max_buffered = max_buffered
        self.max_batch = max_batch
        self.on_stale = on_stale  # called (synchronously) once per session and refused token
        # Called (synchronously) with each batch Redis acknowledged, in order: FanOutReader.appended.
        self.on_appended = on_appended
        self.dropped = 0  # events dropped from a full buffer (not those of a stale owner)
        # Per session, oldest first: (seq, token, entry). An event leaves its buffer only once
        # appended or given up on, so "flushed through seq" is "nothing buffered at or below it".
        self._buffers: dict[str, deque[tuple[int, str, Entry]]] = {}
        self.buffered = 0
        self._seq = 0
        self._stale: set[tuple[str, str]] = set()  # (session, token) refused: later events are dropped unsent
        self._pending = trio.Event()
        self._progress = trio.lowlevel.ParkingLot()

    def publish_nowait(self, session_id: str, token: str, event: Event) -> None:
        """Queue ``event`` (a bus event with an id) for the session's stream. Never blocks."""
        if event.id is None:
            return  # synthetic frames are never stored
        if self.buffered >= self.max_buffered:
            self._drop_oldest()
        self._seq += 1
        self._buffers.setdefault(session_id, deque()).append(
            (self._seq, token, (event.id, event.type, event.json(), event.prompt_id)))
        self.buffered += 1
        self._pending.set()

    def _drop_oldest(self) -> None:
        session_id = min(self._buffers, key=lambda s: self._buffers[s][0][0])
        buffer = self._buffers[session_id]
        buffer.popleft()
        if not buffer:
            del self._buffers[session_id]
        self.buffered -= 1
        self.dropped += 1
        self._progress.unpark_all()

    def _remove(self, session_id: str, which: Callable[[tuple[int, str, Entry]], bool]) -> None:
        buffer = self._buffers.pop(session_id, None) or deque()
        kept = deque(item for item in buffer if not which(item))
        self.buffered -= len(buffer) - len(kept)
        if kept:
            self._buffers[session_id] = kept
        self._progress.unpark_all()

    def _flushed(self, session_id: str, seq: int) -> bool:
        buffer = self._buffers.get(session_id)
        return not buffer or buffer[0][0] > seq

    async def wait_flushed(self, session_id: str | None = None) -> None:
        """Return once everything published before the call (to ``session_id``, or to any session)
        has been appended, or given up on (dropped from a full buffer, or a stale owner's)."""
        seq = self._seq
        while not all(self._flushed(s, seq) for s in ([session_id] if session_id else list(self._buffers))):
            await self._progress.park()

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        delay = BACKOFF_MIN
        ended = -LINGER
        while True:
            await self._pending.wait()
            if trio.current_time() - ended < LINGER and self.buffered < self.max_batch:
                # Events come faster than round trips: a moment's wait makes a round of many, not of two
                # or three (each round costs this process and Redis a command, whatever its size).
                await trio.sleep(LINGER)
            self._pending = trio.Event()
            try:
                await self._send_round()
                ended = trio.current_time()
            except EventsUnavailable as exc:
                log.warning("%s; retrying in %.2f s (%d events buffered)", exc, delay, self.buffered)
                self._pending.set()  # the buffers are kept: try again after the pause
                await trio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)
                continue
            delay = BACKOFF_MIN

    async def _send_round(self) -> None:
        """One append per session with buffered events (its oldest, of one token, at most ``max_batch``), all
        in one round trip: a node streaming many sessions pays one, not one a session in turn."""
        batches: list[tuple[str, str, list[tuple[int, str, Entry]]]] = []
        total = 0
        for session_id, buffer in list(self._buffers.items()):
            token = buffer[0][1]
            if (session_id, token) in self._stale:
                self._drop_token(session_id, token)
                continue
            if total >= MAX_ROUND:
                self._pending.set()  # the rest in the next round
                break
            batch = list(itertools.takewhile(lambda item: item[1] == token, itertools.islice(buffer, self.max_batch)))
            batches.append((session_id, token, batch))
            total += len(batch)
        if not batches:
            return
        results: list[int | StaleOwner]
        if len(batches) == 1:  # the plain call: a pipeline costs more of this process's time
            session_id, token, batch = batches[0]
            try:
                results = [await self.redis.append(session_id, token, [entry for _, _, entry in batch])]
            except StaleOwner as stale:
                results = [stale]
        else:
            results = await self.redis.append_many([(s, token, [entry for _, _, entry in batch])
                                                    for s, token, batch in batches])
        for (session_id, token, batch), result in zip(batches, results):
            if isinstance(result, StaleOwner):
                self._stale.add((session_id, token))
                if self.on_stale is not None:
                    self.on_stale(session_id)
                self._drop_token(session_id, token)
            else:
                self._sent(session_id, batch)

    def _sent(self, session_id: str, batch: list[tuple[int, str, Entry]]) -> None:
        if self.on_appended is not None:
            self.on_appended(session_id, [entry for _, _, entry in batch])
        # The buffer may have lost its oldest events meanwhile (overflow): remove by seq.
        last, buffer = batch[-1][0], self._buffers.get(session_id)
        while buffer and buffer[0][0] <= last:
            buffer.popleft()
            self.buffered -= 1
        if buffer:
            self._pending.set()  # more accumulated while the round trip was in flight
        else:
            self._buffers.pop(session_id, None)
        self._progress.unpark_all()

    def _drop_token(self, session_id: str, token: str) -> None:
        """Give up the session's buffered events of a refused token."""
        self._remove(session_id, lambda item: item[1] == token)
        if session_id in self._buffers:
            self._pending.set()  # events of a newer token


# ----------------------------------------------------------------------------------------- reader


class Follow:
    """Entries of one session's stream with ids above ``after``, in order; see :meth:`FanOutReader.subscribe`.

    Iterating ends when the follow is closed; a follow that fell behind raises
    :class:`FollowOverflow` once the entries it already had are taken.
    """

    def __init__(self, reader: FanOutReader, session_id: str, after: int, max_queued: int) -> None:
        self.session_id = session_id
        self.position = after  # the last id handed to the queue (the reader's side)
        self.last_id = after  # the last id taken by the consumer
        self.overflowed = False
        self._reader = reader
        self._send, self._receive = trio.open_memory_channel[StreamEvent](max_queued)

    def _offer(self, entry: StreamEvent) -> bool:
        """Queue ``entry`` (the reader's side, never blocks); ``False`` once this follow has ended."""
        if entry.id <= self.position:
            return True  # another follow of the session was further behind: this one has it already
        try:
            self._send.send_nowait(entry)
        except trio.WouldBlock:
            self.overflowed = True
            self._send.close()
            return False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        self.position = entry.id
        return True

    def __aiter__(self) -> Follow:
        return self

    async def __anext__(self) -> StreamEvent:
        try:
            entry = await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError):
            if self.overflowed:
                raise FollowOverflow(self.session_id, self.last_id) from None
            raise StopAsyncIteration from None
        self.last_id = entry.id
        return entry

    def receive_nowait(self) -> StreamEvent | None:
        """The next entry if one is queued, else ``None`` (also once ended: iterate to learn how)."""
        try:
            entry = self._receive.receive_nowait()
        except (trio.WouldBlock, trio.EndOfChannel, trio.ClosedResourceError):
            return None
        self.last_id = entry.id
        return entry

    def close(self) -> None:
        """Stop following: the reader drops this follow; iterating ends."""
        self._reader._unfollow(self)
        self._send.close()
        self._receive.close()

    async def aclose(self) -> None:
        self.close()


class _Wakes:
    """This node's wake messages: kept (the newest ``MAX_KEPT_WAKES``) until its one consumer takes them."""

    def __init__(self) -> None:
        self.kept: deque[dict[str, Any]] = deque(maxlen=MAX_KEPT_WAKES)
        self.dropped = 0
        self._lot = trio.lowlevel.ParkingLot()

    def _put(self, message: dict[str, Any]) -> None:
        if len(self.kept) == self.kept.maxlen:
            self.dropped += 1
        self.kept.append(message)
        self._lot.unpark_all()

    def __aiter__(self) -> _Wakes:
        return self

    async def __anext__(self) -> dict[str, Any]:
        while not self.kept:
            await self._lot.park()
        return self.kept.popleft()


class FanOutReader:
    """One blocking read per node over its wake stream and every followed session stream."""

    def __init__(self, redis: RedisEvents, node_id: str, *, block_ms: int = DEFAULT_BLOCK_MS,
                 max_queued: int = DEFAULT_MAX_QUEUED) -> None:
        self.redis = redis
        self.node_id = node_id
        self.block_ms = block_ms
        self.max_queued = max_queued
        self._follows: dict[str, list[Follow]] = {}
        self._wakes = _Wakes()
        self._wake_cursor: str | None = None
        self._blocked: trio.CancelScope | None = None
        self._reading: dict[str, str] = {}  # the streams of the read under way (or last done)
        # Sessions this node appends to: the last id Redis acknowledged (or had when it was claimed).
        self._owned: dict[str, int] = {}
        # A session stream whose last entry read was malformed (skipped): the read goes on after it.
        self._skipped: dict[str, str] = {}

    def subscribe(self, session_id: str, after: int, max_queued: int | None = None) -> Follow:
        """Follow the session's stream from ``after`` (entries above it, even those already there); one
        ``max_queued`` entries behind (default: the reader's) is ended."""
        follow = Follow(self, session_id, after, max_queued or self.max_queued)
        self._skipped.pop(session_id, None)  # this follow may need what lies before it (skipped again if so)
        self._follows.setdefault(session_id, []).append(follow)
        self._restart_if_behind(session_id)  # a new stream, or one read from further back
        return follow

    def own(self, session_id: str, last_id: int) -> None:
        """This node appends the session's events from now on, after ``last_id``: its follows get them from
        :meth:`appended`, and the stream is read only for a follow that is behind."""
        self._owned[session_id] = max(last_id, self._owned.get(session_id, 0))
        self._restart_if_behind(session_id)

    def disown(self, session_id: str) -> None:
        """This node no longer appends the session's events: its follows read the stream (another owner's next)."""
        if self._owned.pop(session_id, None) is not None:
            self._restart_if_behind(session_id)

    def appended(self, session_id: str, entries: Sequence[Entry]) -> None:
        """``(id, type, data[, prompt_id])`` entries Redis has acknowledged, in order (the publisher's call)."""
        if not entries:
            return
        if session_id in self._owned:
            self._owned[session_id] = max(self._owned[session_id], entries[-1][0])
        follows = self._follows.get(session_id)
        if not follows:
            return
        events = [StreamEvent(e[0], e[1], e[2], e[3] if len(e) > 3 else None) for e in entries]  # type: ignore[misc]
        for follow in list(follows):
            for event in events:
                if event.id > follow.position + 1:
                    break  # not what comes next for it (a gap, or it is behind): the XREAD brings it
                if not follow._offer(event):
                    self._unfollow(follow)
                    break
        self._restart_if_behind(session_id)

    def _wanted(self, session_id: str) -> str | None:
        """The session's cursor in the XREAD, or ``None`` when it need not be read (no follow, or every
        follow of a session owned here has what Redis acknowledged)."""
        follows = self._follows.get(session_id)
        if not follows:
            return None
        position = min(f.position for f in follows)
        owned = self._owned.get(session_id)
        if owned is not None and position >= owned:
            return None
        skipped = self._skipped.get(session_id)
        if skipped is not None and _id_order(skipped) > (position, 0):
            return skipped
        return f"{position}-0"

    def _skip_to(self, session_id: str, identifier: bytes) -> None:
        self._skipped[session_id] = identifier.decode()

    def _restart_if_behind(self, session_id: str) -> None:
        """Restart the read if it lacks the session's stream, or reads it from further on than needed."""
        wanted = self._wanted(session_id)
        if wanted is None:
            return
        reading = self._reading.get(events_key(session_id))
        if reading is None or _entry_id(wanted.encode()) < _entry_id(reading.encode()):
            self._restart()

    def wakes(self) -> _Wakes:
        """This node's wake messages (dicts) as an async iterator; for one consumer."""
        return self._wakes

    def _unfollow(self, follow: Follow) -> None:
        follows = self._follows.get(follow.session_id)
        if follows and follow in follows:
            follows.remove(follow)
            if not follows:
                del self._follows[follow.session_id]
                self._skipped.pop(follow.session_id, None)
                if events_key(follow.session_id) in self._reading:
                    self._restart()

    def _restart(self) -> None:
        if self._blocked is not None:
            self._blocked.cancel()

    def _streams(self) -> dict[str, str]:
        assert self._wake_cursor is not None
        streams = {wake_key(self.node_id): self._wake_cursor}
        for session_id in self._follows:
            if (cursor := self._wanted(session_id)) is not None:
                streams[events_key(session_id)] = cursor
        return streams

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        delay = BACKOFF_MIN
        while self._wake_cursor is None:  # wake-ups from before this start are not for us
            try:
                self._wake_cursor = await self.redis.wake_tail(self.node_id)
            except EventsUnavailable as exc:
                log.warning("%s; retrying in %.2f s", exc, delay)
                await trio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)
        task_status.started()
        while True:
            # Nothing awaits between a delivery and building the next read, so a subscribe
            # either lands in this set of streams or cancels the read that lacks it.
            streams, got, failed = self._streams(), {}, None
            self._reading = streams
            with trio.CancelScope() as scope:
                self._blocked = scope
                try:
                    got = await self.redis.read_block(streams, self.block_ms)
                except EventsUnavailable as exc:
                    failed = exc
                finally:
                    self._blocked = None
            if failed is not None:  # the backoff is not cut short by subscribes
                log.warning("%s; retrying in %.2f s", failed, delay)
                await trio.sleep(delay)
                delay = min(delay * 2, BACKOFF_MAX)
            elif not scope.cancelled_caught:  # else: positions only move on delivery, the new read resumes there
                delay = BACKOFF_MIN
                self._deliver(got)

    def _deliver(self, got: dict[str, Any]) -> None:
        wake = wake_key(self.node_id)
        for key, entries in got.items():
            if key == wake:
                for entry in entries:
                    self._wake_cursor = entry.identifier.decode()
                    try:
                        message = orjson.loads(entry.field_values[b"m"])
                        if not isinstance(message, dict):
                            raise ValueError("not an object")
                        self._wakes._put(message)
                    except (KeyError, ValueError):  # orjson.JSONDecodeError is a ValueError
                        log.warning("node %s: ignored a malformed wake message %s", self.node_id, self._wake_cursor)
                continue
            session_id = key.removeprefix("trellis:events:")
            follows = self._follows.get(session_id)
            if not follows:
                continue  # unfollowed while the read was in flight
            events = self.redis.malformed.parse(session_id, entries)
            if entries and entries[-1].identifier != b"%d-0" % (events[-1].id if events else -1):
                # A skipped entry last: the shared cursor must still move past it, or the read returns it
                # again at once. The follows' positions stay, so a later real event still follows on.
                self._skip_to(session_id, entries[-1].identifier)
            for follow in list(follows):
                if not all(follow._offer(e) for e in events):
                    self._unfollow(follow)
