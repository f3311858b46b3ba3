"""One daemon of a cluster: the leases it holds, the sessions it takes over, its events in Redis.

A session is owned by one node at a time — the one holding its lease at the
current fencing epoch (:mod:`.leases`). The node:

1. **claims before a session starts** (:meth:`ClusterNode.before_start`, called
   by the daemon for every session it starts): a new session gets a lease at
   epoch 1; a stored one is claimed only if no live node owns it (else
   :class:`SessionElsewhere`). The epoch goes into the store's fence and the
   Redis owner key, so from then on only this node's writes are taken.
2. **renews** every ``lease_seconds / 3`` in one statement. A session missing
   from the answer, or at another epoch, was taken over: it is stopped here at
   once without writing (its writes would be refused anyway) and its processes
   are killed. A node that cannot renew for ``lease_seconds`` stops every
   session, since another node may own them by now.
3. **claims orphans** on the same tick: sessions whose owner stopped renewing
   (killed, partitioned, paused) or released them, up to its cap, with
   ``FOR UPDATE SKIP LOCKED`` so racing nodes split them. Each is restored as a
   restart restores it: the guard cleared, queued prompts run in order, and the
   prompt that was running ends ``turn_error`` ``node_lost`` (``daemon_restarted``
   after a clean hand-over), never re-run. The session's ``eventEpoch`` is kept
   and its event ids continue from the last one in Redis, so a client that saw
   the last event reconnects with no gap and no duplicate.
4. **mirrors events** of the sessions it owns to Redis (:class:`EventPublisher`,
   fenced by the owner key), where every other node's SSE route reads them.
   The owner's SSE streams get each batch once Redis acknowledged it, handed
   over in process (:meth:`FanOutReader.appended`): no client sees an event
   the next owner would not continue after. A ``session_closed`` that only
   hands the session over is not mirrored.
5. **takes prompts other nodes admitted** (the inbox) when woken through its
   Redis wake stream, and on every tick in case a wake was lost.
6. **drains** on request (``SIGTERM``): no new sessions are placed here, running
   turns get the shutdown bound to finish, then each session is closed and its
   lease released, and another node is woken to claim them at once.
"""

from __future__ import annotations

import logging
from functools import partial
from typing import TYPE_CHECKING, Any, Protocol

import attrs
import trio

from .. import wire
from ..daemon import NotStartedHere, UnknownSession
from ..session.fifo import Admitted
from ..session.images import accepts_images, prompt_images
from ..session.prompt_records import PendingPrompt, admitted_record
from ..settings import CLUSTER_BACKENDS
from ..storage import DAEMON_RESTARTED, NODE_LOST
from .database import DatabaseUnavailable
from .events import EventPublisher, EventsUnavailable, FanOutReader, RedisEvents
from .leases import Claimed, Leases, Node, Owner, SessionOwned
from .store import Fence, PostgresStore

if TYPE_CHECKING:
    from ..daemon import Daemon
    from ..events import EventBus


class ObservedSession(Protocol):
    """What the daemon shows its observers of a session it starts (before it runs) and of one that ended."""

    session_id: str
    bus: EventBus
    interrupted_code: str
    shutdown_reason: str | None

log = logging.getLogger("trellis.cluster")

LEASE_LOST = "lease_lost"  # the close reason of a session another node took over
RESTORE_BATCH = 32  # sessions a lease round takes over together: their lookups batched, their rows held in memory
HANDOVER_REASONS = frozenset({"daemon_shutdown", LEASE_LOST})  # closes the next owner's stream goes on from


class SessionElsewhere(NotStartedHere):
    """Another live node owns this session; ``owner`` says which (and where)."""

    code = "session_elsewhere"

    def __init__(self, owner: Owner) -> None:
        super().__init__(f"session {owner.session_id} is owned by node {owner.node_id} ({owner.advertise_url})")
        self.owner = owner


class NodeDraining(NotStartedHere):
    """This node is draining: it starts no session."""

    code = "node_draining"


@attrs.frozen
class ClusterConfig:
    """Where the cluster keeps things and who this node is (``trellis serve --store … --events …``)."""

    store_url: str
    events_url: str
    node_id: str
    advertise_url: str = ""  # empty: the URL the daemon is bound at (known once it serves)
    lease_seconds: float = 5.0
    max_sessions: int = 100
    # cluster.allowUnauthenticated: the backends this node may use although they answer without credentials
    # (actors.cluster.exposure); the settings file's were checked when it was read.
    allow_unauthenticated: frozenset[str] = attrs.field(default=frozenset(), converter=frozenset)

    def __attrs_post_init__(self) -> None:
        if not self.store_url.startswith(("postgresql://", "postgres://")):
            raise ValueError("cluster store must be a postgresql:// URL")
        if not self.events_url.startswith(("redis://", "rediss://", "unix://")):
            raise ValueError("cluster events must be a redis:// URL")
        if not self.node_id or not all(c.isalnum() or c in "._-" for c in self.node_id) or len(self.node_id) > 64:
            raise ValueError(f"node id {self.node_id!r}: use 1 to 64 letters, digits, '.', '_' and '-'")
        if self.advertise_url and not self.advertise_url.startswith(("http://", "https://")):
            raise ValueError("advertise URL must be the http:// or https:// URL other nodes reach this one at")
        if not 0.5 <= self.lease_seconds <= 300:
            raise ValueError("lease seconds must be from 0.5 to 300")
        if unknown := self.allow_unauthenticated - set(CLUSTER_BACKENDS):
            raise ValueError(f"allowUnauthenticated: {', '.join(sorted(unknown))} is not one of "
                             f"{', '.join(CLUSTER_BACKENDS)}")


@attrs.define
class _Resume:
    """What a session starting here continues from: its stream's epoch and last id, how it lost its prompt."""

    epoch: int
    event_epoch: str | None
    last_id: int
    code: str


class ClusterNode:
    """This daemon's place in the cluster. Build it with :func:`open_cluster`; run it with :meth:`run`."""

    def __init__(self, config: ClusterConfig, store: PostgresStore, fence: Fence, leases: Leases,
                 events: RedisEvents) -> None:
        self.config = config
        self.store = store
        self.fence = fence
        self.leases = leases
        self.events = events
        self.reader = FanOutReader(events, config.node_id)
        # What Redis acknowledged goes straight to this node's follows of its own sessions (no read back).
        self.publisher = EventPublisher(events, on_stale=self._stale_events, on_appended=self.reader.appended)
        self.draining = False
        self.daemon: Daemon | None = None
        self._resume: dict[str, _Resume] = {}
        # Sessions being taken over here (by a lease round or for a request): one restore at a time each.
        self._restoring: dict[str, trio.Event] = {}
        self._nursery: trio.Nursery | None = None
        self._tick_now = trio.Event()
        self._renewed_at: float | None = None
        self.ticks = 0  # lease rounds done (tests wait on them)
        self._ticked = trio.Event()
        fence.on_lost = self._lost_nowait

    @property
    def node_id(self) -> str:
        return self.config.node_id

    def token(self, epoch: int) -> str:
        """The Redis owner key's value at ``epoch``."""
        return f"{self.node_id}:{epoch}"

    # ------------------------------------------------------------- running

    def attach(self, daemon: Daemon) -> None:
        """Hook into ``daemon`` before it starts any session: its sessions hold leases from then on."""
        self.daemon = daemon
        daemon.placement = self
        daemon.session_observers.append(self.observe_session)
        daemon.runtime.telemetry.watch(leases=lambda: len(self.fence.epochs))  # GET /metrics: leases held

    async def run(self, advertise_url: str | None = None, *,
                  task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Be this node until cancelled: register (at ``advertise_url`` unless the config names one),
        renew, claim, take wakes. :meth:`attach` first."""
        assert self.daemon is not None, "attach the node to its daemon first"
        if not self.config.advertise_url:
            if not advertise_url:
                raise ValueError("the node needs the URL other nodes reach it at")
            self.config = attrs.evolve(self.config, advertise_url=advertise_url)
            self.leases.advertise_url = advertise_url
        await trio.to_thread.run_sync(self.leases.register)
        # Leases naming this node that this process does not hold are an earlier process's (one that died
        # under the same node id): its renewals would keep them alive forever, so they are taken over now.
        stranded = set(await trio.to_thread.run_sync(self.leases.held)) - set(self.fence.epochs)
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            await nursery.start(self.publisher.run)
            # Not awaited: a Redis that is away at start must not hold the node (nor a SIGTERM) back;
            # the reader retries on its own, and each lease round sweeps the inbox a lost wake would have named.
            nursery.start_soon(self.reader.run)
            nursery.start_soon(self._take_wakes)
            reclaimed = []
            for session_id in sorted(stranded):
                claimed = await trio.to_thread.run_sync(self.leases.claim, session_id)
                if claimed is not None:
                    reclaimed.append(attrs.evolve(claimed, released=False))  # that process died
            await self._restore_claimed(reclaimed)
            await self._tick()  # sessions orphaned while no node ran are taken before the first request
            nursery.start_soon(self._keep_leases)
            task_status.started()

    async def _keep_leases(self) -> None:
        while True:
            with trio.move_on_after(self.config.lease_seconds / 3):
                await self._tick_now.wait()
            self._tick_now = trio.Event()
            await self._tick()

    def tick_soon(self) -> None:
        """Run a lease round now rather than at the next interval (a wake asked to claim)."""
        self._tick_now.set()

    async def wait_ticks(self, count: int = 1) -> None:
        """Return once ``count`` more lease rounds have run."""
        target = self.ticks + count
        while self.ticks < target:
            await self._ticked.wait()

    async def _tick(self) -> None:
        try:
            await self._renew()
            if not self.draining:
                await self._claim_orphans()
            await self._sweep_inbox()
        except (DatabaseUnavailable, EventsUnavailable, OSError) as exc:
            log.warning("node %s: lease round failed: %s", self.node_id, exc)
            self._give_up_if_stale()
        finally:
            self.ticks += 1
            self._ticked.set()
            self._ticked = trio.Event()

    async def _renew(self) -> None:
        # Only leases held before the renewal's statement can be judged by its answer: one acquired or
        # claimed while it ran (a request starting a session) may be missing from it and is not lost.
        before = dict(self.fence.epochs)
        held = await trio.to_thread.run_sync(self.leases.renew)
        self._renewed_at = trio.current_time()
        for session_id, epoch in before.items():
            if self.fence.epoch(session_id) == epoch and held.get(session_id) != epoch:
                log.warning("node %s: lease of session %s lost (epoch %s; the database says %s)", self.node_id,
                            session_id, epoch, held.get(session_id))
                self._lost_nowait(session_id)

    def _give_up_if_stale(self) -> None:
        # Unable to renew for a whole lease: another node may own these sessions by now.
        started = self._renewed_at
        if started is not None and trio.current_time() - started >= self.config.lease_seconds:
            for session_id, epoch in list(self.fence.epochs.items()):
                # Said as the other two ways of losing a lease say it (a renewal, a refused write).
                log.warning("node %s: lease of session %s lost (epoch %s; not renewed for %.1f s)", self.node_id,
                            session_id, epoch, trio.current_time() - started)
                self._lost_nowait(session_id)

    async def _claim_orphans(self) -> None:
        assert self.daemon is not None
        room = self.config.max_sessions - self.daemon.session_count
        if room <= 0:
            return
        claimed = await trio.to_thread.run_sync(self.leases.claim_orphans, room)
        await self._restore_claimed(claimed)

    async def _restore_claimed(self, claimed: list[Claimed]) -> None:
        """Restore the sessions a lease round claimed, :data:`RESTORE_BATCH` at a time: a batch's owner keys and
        stream tails in one Redis round trip, its rows in one read of the database (:meth:`PostgresStore.prefetch`),
        so a takeover of a thousand sessions is not some ten thousand round trips."""
        for start in range(0, len(claimed), RESTORE_BATCH):
            if start:
                await self._renew_if_due()
            # Those a request is taking over here already (it claimed them itself) are left to it.
            batch = [c for c in claimed[start:start + RESTORE_BATCH] if c.session_id not in self._restoring]
            ids = [c.session_id for c in batch]
            done = {session_id: trio.Event() for session_id in ids}
            self._restoring.update(done)
            try:
                waiting = await trio.to_thread.run_sync(self.store.prefetch, ids)
                for c in batch:
                    self.fence.hold(c.session_id, c.epoch)
                tails = await self.events.claim_many({c.session_id: self.token(c.epoch) for c in batch})
                for c in batch:
                    self._note_resume(c.session_id, c.epoch, self.store.record_read(c.session_id) or {},
                                      tails[c.session_id], DAEMON_RESTARTED if c.released else NODE_LOST)
                for c in batch:
                    try:
                        await self._restore_one(c, c.session_id in waiting)
                    finally:
                        self._restored(c.session_id, done)  # a request waiting for it goes on now
            finally:
                self.store.drop_prefetched(ids)
                for session_id in list(done):
                    self._restored(session_id, done)

    async def _renew_if_due(self) -> None:
        # A takeover of many sessions can outlast a lease: renewed between its batches, the leases this node
        # holds (those just claimed too) never run out while it restores.
        if self._renewed_at is not None and trio.current_time() - self._renewed_at >= self.config.lease_seconds / 3:
            await self._renew()

    def _restored(self, session_id: str, done: dict[str, trio.Event]) -> None:
        event = done.pop(session_id, None)
        if event is not None:
            del self._restoring[session_id]
            event.set()

    async def _restore_one(self, claimed: Claimed, inbox: bool) -> None:
        """Start a session held (:meth:`_note_resume`) from its stored rows; ``inbox``: prompts wait there."""
        assert self.daemon is not None
        session_id = claimed.session_id
        log.info("node %s: took over session %s at epoch %d from %s (%s)", self.node_id, session_id,
                 claimed.epoch, claimed.previous_node, "handed over" if claimed.released else "lost")
        self.daemon.runtime.telemetry.took_over()
        try:
            await self.daemon.load_session(session_id)
            if inbox:  # prompts admitted elsewhere while it had no owner (later ones: a wake, or the next sweep)
                await self.take_inbox(session_id)
        except Exception as exc:  # noqa: BLE001 - any failure: hand it back rather than hold it dead
            log.error("node %s: session %s not restored (%s); released for another node", self.node_id,
                      session_id, exc)
            if self.fence.epoch(session_id) == claimed.epoch:
                self._forget(session_id)
                await trio.to_thread.run_sync(self.leases.release, session_id, claimed.epoch)

    def live_here(self, session_id: str) -> bool:
        """Whether the session runs on this node (a lookup, not a walk over every session)."""
        assert self.daemon is not None
        try:
            self.daemon.get(session_id)
        except UnknownSession:
            return False
        return True

    async def take_over(self, session_id: str) -> None:
        """Restore ``session_id`` here for a request (no live node owns it), or wait for the restore
        already under way here; raises :class:`SessionElsewhere` if another node got it first."""
        assert self.daemon is not None
        while (pending := self._restoring.get(session_id)) is not None:
            await pending.wait()
        if self.live_here(session_id):
            return
        done = self._restoring[session_id] = trio.Event()
        try:
            await self.daemon.load_session(session_id)
            await self.take_inbox(session_id)
        finally:
            del self._restoring[session_id]
            done.set()

    async def _hold(self, session_id: str, epoch: int, code: str) -> None:
        """Fence the store and Redis at ``epoch`` and note what the session continues from."""
        self.fence.hold(session_id, epoch)
        await self.events.set_owner(session_id, self.token(epoch))
        record = await trio.to_thread.run_sync(self.store.record_read, session_id) or {}
        last_id = await self.events.last_id(session_id)
        self._note_resume(session_id, epoch, record, last_id, code)

    def _note_resume(self, session_id: str, epoch: int, record: dict[str, Any], last_id: int, code: str) -> None:
        event_epoch = record.get("eventEpoch")
        self._resume[session_id] = _Resume(epoch, event_epoch if isinstance(event_epoch, str) else None,
                                           last_id, code)
        self.reader.own(session_id, last_id)

    def _forget(self, session_id: str) -> None:
        self.fence.drop(session_id)
        self._resume.pop(session_id, None)
        self.reader.disown(session_id)  # its follows here read the stream: the next owner writes it

    async def _sweep_inbox(self) -> None:
        assert self.daemon is not None
        live = {h.session_id: h for h in self.daemon.sessions() if h.session_id in self.fence.epochs}
        if not live:
            return
        waiting = await trio.to_thread.run_sync(self.store.inbox_sessions, list(live))
        for session_id in waiting:
            await self.take_inbox(session_id)

    async def take_inbox(self, session_id: str) -> int:
        """Queue the prompts other nodes admitted for ``session_id``, if it is live here."""
        assert self.daemon is not None
        if session_id not in self.fence.epochs or not self.live_here(session_id):
            return 0
        handle = self.daemon.get(session_id)
        return await handle.take_inbox(partial(self.store.inbox_take, session_id))

    async def _take_wakes(self) -> None:
        async for message in self.reader.wakes():
            op = message.get("op")
            if op == "inbox" and isinstance(message.get("session"), str):
                try:
                    await self.take_inbox(message["session"])
                except Exception as exc:  # noqa: BLE001 - the tick's sweep retries
                    log.warning("node %s: inbox of %s not taken: %s", self.node_id, message["session"], exc)
            elif op == "claim":
                self.tick_soon()

    # ------------------------------------------------------------- the daemon's hooks

    async def before_start(self, session_id: str, restore: bool) -> None:
        """Called by the daemon before a session starts here: hold its lease, or refuse."""
        if session_id in self._resume and session_id in self.fence.epochs:
            return  # claimed by a lease round, being restored
        if self.draining:
            raise NodeDraining(f"node {self.node_id} is draining: it starts no session")
        owner = await trio.to_thread.run_sync(self.leases.owner, session_id)
        if owner is not None and owner.live and owner.node_id != self.node_id:
            raise SessionElsewhere(owner)
        if owner is None:
            epoch = await trio.to_thread.run_sync(self._acquire, session_id)
            code = DAEMON_RESTARTED
        else:
            claimed = await trio.to_thread.run_sync(self.leases.claim, session_id)
            if claimed is None:  # another node was quicker
                owner = await trio.to_thread.run_sync(self.leases.owner, session_id)
                if owner is None:
                    raise NodeDraining(f"session {session_id} is changing hands; try again")
                raise SessionElsewhere(owner)
            epoch, code = claimed.epoch, DAEMON_RESTARTED if claimed.released else NODE_LOST
            if self.daemon is not None:
                self.daemon.runtime.telemetry.took_over()  # a request's takeover (a lease round's counts its own)
        await self._hold(session_id, epoch, code)

    def _acquire(self, session_id: str) -> int:
        try:
            return self.leases.acquire(session_id)
        except SessionOwned as exc:
            raise SessionElsewhere(exc.owner) from None

    def start_failed(self, session_id: str) -> None:
        """The daemon could not start a session it had a lease for: give the lease up."""
        epoch = self.fence.epoch(session_id)
        self._forget(session_id)
        if epoch is not None and self._nursery is not None:
            self._nursery.start_soon(trio.to_thread.run_sync, self.leases.drop, session_id, epoch)

    def observe_session(self, session: ObservedSession) -> None:
        """Every new session, before it publishes: continue its stream, mirror its events to Redis."""
        resume = self._resume.pop(session.session_id, None)
        if resume is None:
            return
        if resume.event_epoch is not None:
            session.bus.epoch = resume.event_epoch
        session.bus.continue_after(resume.last_id)
        session.interrupted_code = resume.code
        token = self.token(resume.epoch)
        publish = self.publisher.publish_nowait

        def mirror(event: Any) -> None:
            # A hand-over's close is this node's business only: the stream goes on at the next owner.
            if event.type == "session_closed" and event.data.get("reason") in HANDOVER_REASONS:
                return
            publish(session.session_id, token, event)

        session.bus.observers.append(mirror)

    def session_ended(self, session: ObservedSession) -> None:
        """A session stopped here: a deleted or crashed one gives its lease up, a handed-over one was released."""
        session_id = session.session_id
        epoch = self.fence.epoch(session_id)
        self._forget(session_id)
        if epoch is None or self._nursery is None:
            return  # lost already, or the node is gone (its leases expire)
        try:
            if session.shutdown_reason == "daemon_shutdown":
                self._nursery.start_soon(self._release, session_id, epoch)
            elif session.shutdown_reason != LEASE_LOST:
                self._nursery.start_soon(trio.to_thread.run_sync, self.leases.drop, session_id, epoch)
        except RuntimeError:  # the node stopped first: the lease runs out and another node takes the session
            pass

    async def _release(self, session_id: str, epoch: int) -> None:
        await self.publisher.wait_flushed(session_id)
        if await trio.to_thread.run_sync(self.leases.release, session_id, epoch):
            await self._wake_placement()

    async def _wake_placement(self) -> None:
        node = await trio.to_thread.run_sync(self.leases.place)
        if node is not None and node.node_id != self.node_id:
            await self.events.wake(node.node_id, {"op": "claim"})

    # ------------------------------------------------------------- losing a session

    def _stale_events(self, session_id: str) -> None:
        """Redis refused this node's events of ``session_id``: a newer owner writes its stream now."""
        epoch = self.fence.epoch(session_id)
        if epoch is not None:  # said as a failed renewal and a refused write say it
            log.warning("node %s: lease of session %s lost (epoch %s): Redis holds a newer owner's events",
                        self.node_id, session_id, epoch)
        self._lost_nowait(session_id)

    def _lost_nowait(self, session_id: str) -> None:
        """Another node owns ``session_id`` now: stop it here at once, writing nothing more."""
        if self.fence.epoch(session_id) is None:
            return
        self._forget(session_id)
        daemon = self.daemon
        if daemon is None:
            return
        daemon.close_for_handover(session_id, LEASE_LOST)  # its background actors kill their process groups

    # ------------------------------------------------------------- drain

    async def drain(self, bound: float) -> None:
        """Hand every session over (``SIGTERM``): place nothing here, let running turns finish within
        ``bound`` seconds, then close each session and release its lease for another node."""
        assert self.daemon is not None
        self.draining = True
        await trio.to_thread.run_sync(self.leases.set_draining)
        self.daemon.start_no_new_work("daemon_shutdown")  # queued prompts stay queued
        with trio.move_on_after(bound):
            while any(h.summary()["state"] == "running" for h in self.daemon.sessions()):
                await trio.sleep(0.05)
        for handle in self.daemon.sessions():
            epoch = self.fence.epoch(handle.session_id)
            closed = self.daemon._close_for_shutdown(handle)
            if closed is not None:
                await closed.wait()
            if epoch is not None:
                await self.publisher.wait_flushed(handle.session_id)
                await trio.to_thread.run_sync(self.leases.release, handle.session_id, epoch)
        await self._wake_placement()

    # ------------------------------------------------------------- requests for sessions owned elsewhere

    async def place(self) -> Any:
        """The least-loaded live node that takes sessions (:meth:`Leases.place`), or ``None``."""
        return await trio.to_thread.run_sync(self.leases.place)

    async def nodes(self) -> list[Node]:
        """Every node's row (:meth:`Leases.nodes`): id, advertise URL, liveness."""
        return await trio.to_thread.run_sync(self.leases.nodes)

    async def owners(self, session_ids: list[str]) -> dict[str, Owner]:
        return await trio.to_thread.run_sync(self.leases.owners, session_ids)

    async def owner(self, session_id: str) -> Owner | None:
        return await trio.to_thread.run_sync(self.leases.owner, session_id)

    async def admit_elsewhere(self, session_id: str, owner: Owner, body: wire.PromptBody,
                              client_id: str | None) -> Admitted:
        """Admit a prompt for a session another node owns: into the inbox (durable), then wake the owner.

        Returns what the owner would have: the prompt id, the session's last
        event id (the prompt's events come after it) and its epoch. Raises
        :class:`~actors.session.images.ImageRefused` for images the model cannot
        take, ``KeyError`` for a session the cluster does not know, ``OSError``
        when the inbox cannot be written (nothing is admitted then).
        """
        assert self.daemon is not None
        runtime = self.daemon.runtime
        prompt_images(body, accepts_images(runtime.provider))
        entry = PendingPrompt(runtime.ids.new("prompt"), body, body.text, runtime.clock_ms(), client_id, waited=True)
        record = admitted_record(entry)
        stored = await trio.to_thread.run_sync(self.store.record_read, session_id) or {}
        last_id = await self.events.last_id(session_id)
        await trio.to_thread.run_sync(self.store.inbox_admit, session_id, record, self.node_id)
        try:
            if owner.live and owner.node_id:
                await self.events.wake(owner.node_id, {"op": "inbox", "session": session_id})
            else:  # between owners: whoever claims it takes the inbox with it
                await self._wake_placement()
        except (EventsUnavailable, DatabaseUnavailable) as exc:  # admitted all the same: the owner's next lease round takes it
            log.warning("node %s: owner %s of %s not woken: %s", self.node_id, owner.node_id, session_id, exc)
        return Admitted(entry.prompt_id, last_id, stored.get("eventEpoch"))

    async def event_epoch(self, session_id: str) -> str | None:
        stored = await trio.to_thread.run_sync(self.store.record_read, session_id) or {}
        epoch = stored.get("eventEpoch")
        return epoch if isinstance(epoch, str) else None


__all__ = ["LEASE_LOST", "ClusterConfig", "ClusterNode", "NodeDraining", "SessionElsewhere"]
