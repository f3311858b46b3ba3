"""A session's background work: the nursery its actors live in, their registry, the automatic queue.

Shells, monitors, wakeups and cron jobs are actors started in the manager's
nursery, which lives inside the session's: closing the session cancels them
all, and each kills what it started on the way out. Their terminal
notifications and fires go to the :class:`AutomaticQueue`, from which an idle
session starts automatic turns.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from datetime import datetime, timedelta
from typing import Any

import trio

from .. import wire
from .._actor import ActorRef
from ..ids import IdSource
from ..process import NO_SANDBOX, Sandbox
from . import monitor as m
from . import scheduler as sch
from . import shell as sh
from .automatic import AutomaticItem, AutomaticQueue, Posted
from .registry import BackgroundItem, BackgroundRegistry, Baseline

log = logging.getLogger("trellis.background")

NOTIFICATION_TEXT_LIMIT = 8000
OUTPUT_EVENT_LIMIT = 1024  # characters, and UTF-8 bytes, of output per background_task event (the ring keeps 8000)
MAX_LIVE_TASKS = 256


class BackgroundLimit(Exception):
    """Too many live background tasks in one session."""


class BackgroundManager:
    """Starts, tracks and stops one session's background actors."""

    def __init__(
        self,
        session_id: str,
        ids: IdSource,
        *,
        publish: Callable[[str, dict[str, Any]], None],
        wake: Callable[[], None],
        now: Callable[[], datetime],
        related: Callable[[AutomaticItem], bool] = lambda _: False,
        sandbox: Sandbox = NO_SANDBOX,
        journal: Callable[[dict[str, Any]], Awaitable[None] | None] | None = None,
    ) -> None:
        self.session_id = session_id
        # Appends one journal record, OSError when it cannot, and returns what makes it durable (to await;
        # None: it is): @wakeups and cron jobs are written down, so a restart (or another node of a
        # cluster) brings them back (None: nothing is kept). See JournalWriter.append_then_sync.
        self._journal = journal
        self._timers: dict[str, dict[str, Any]] = {}  # live timers' "timer" records (for compaction)
        self.sandbox = sandbox  # where shells and monitor commands run
        self._ids = ids
        self._publish = publish
        self._now = now
        self.related = related
        self.registry = BackgroundRegistry()
        self.queue = AutomaticQueue(on_post=wake)
        self._shells: dict[str, sh.ShellTask] = {}
        self.output_budget = sh.OutputBudget()  # what all of the session's background shells keep, in bytes
        self._listeners: dict[str, list[Callable[[str | None], None]]] = {}
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            task_status.started()
            await trio.sleep_forever()

    # ------------------------------------------------------------- queries

    def snapshot(self) -> Baseline:
        """The baseline: ids live now plus task ids of notifications and wakeups already queued."""
        return self.registry.snapshot(self.queue.queued_task_ids())

    def status(self) -> list[dict[str, Any]]:
        # one reading of each clock: the wall clock's now, less how long ago on Trio's clock
        now_ms, now = self._now().timestamp() * 1000, trio.current_time()
        return [item.to_wire(lambda t: round(now_ms - (now - t) * 1000)) for item in self.registry]

    @property
    def processes_live(self) -> bool:
        """Whether a background shell's process runs (it may be changing files while no turn runs)."""
        return bool(self._shells)

    def read_output(self, task_id: str) -> tuple[BackgroundItem, str, int] | None:
        shell = self._shells.get(task_id)
        item = self.registry.get(task_id)
        if shell is None or item is None:
            return None
        text, lost = shell.output.read_new()
        return item, text, lost

    # ------------------------------------------------------------- shells

    async def start_shell(self, command: str, cwd: str) -> BackgroundItem:
        self._check_capacity()
        task_id = self._ids.new("shell")
        item = self.registry.add(BackgroundItem(task_id, "shell", command, started_at=trio.current_time()))
        disk = self.sandbox.disk
        kills = disk.kills if disk is not None else 0

        def on_output(text: str) -> None:
            self._output_event(item, text)
            for listen in self._listeners.get(task_id, ()):
                listen(text)

        def on_exit(code: int | None, killed: bool) -> None:
            item.exit_code = code
            item.state = "killed" if killed else ("completed" if code == 0 else "failed")
            item.ended_at = trio.current_time()
            for listen in self._listeners.pop(task_id, ()):
                listen(None)
            self._event(item, "finished")
            verb = "was killed" if killed else f"finished with exit code {code}"
            stopped = disk.stopped_since(kills) if disk is not None else None
            if stopped is not None:  # the disk reserve killed it: say why
                verb = f"finished with exit code {code}; {stopped}"
            self.notify(item, f"Background shell {task_id} (`{command}`) {verb}. "
                              f"Read its output with shell_output {{\"task_id\": \"{task_id}\"}}.")

        task = sh.ShellTask(task_id, command, cwd, on_output=on_output, on_exit=on_exit, sandbox=self.sandbox,
                            budget=self.output_budget)
        self._shells = {k: v for k, v in self._shells.items() if self.registry.get(k) is not None}
        self._shells[task_id] = task
        assert self._nursery is not None
        try:
            item.actor = await self._nursery.start(task.run)
        except OSError as exc:
            item.state = "failed"
            raise BackgroundLimit(f"cannot start the shell: {exc}") from None
        self._event(item, "started")
        return item

    async def kill(self, task_id: str) -> bool:
        """Stop a shell (its whole process group), monitor, wakeup or cron job."""
        item = self.registry.get(task_id)
        if item is None or not item.live or item.actor is None:
            return False
        ref: ActorRef[Any] = item.actor
        message = {"shell": sh.Kill, "monitor": m.Stop}.get(item.kind, sch.Cancel)
        try:
            await ref.ask(message, timeout=10)
        except Exception:
            return False
        if item.kind in ("wakeup", "cron"):
            item.state = "cancelled"
            item.ended_at = trio.current_time()
            self.queue.remove_task(task_id)
            self._event(item, "finished")
            self._timers.pop(task_id, None)
            # Even when a fire under way took it out already: its record may not be durable yet.
            await self._write_quietly({"op": "timer_ended", "taskId": task_id})
        return True

    # ------------------------------------------------------------- work run elsewhere

    def track(self, kind: str, label: str) -> BackgroundItem:
        """Register background work that runs outside this manager (a subagent run: kind ``agent``).

        The caller reports its end with :meth:`finish`; until then it is live, so it takes part
        in work-chain baselines like a shell would.
        """
        self._check_capacity()
        item = self.registry.add(BackgroundItem(self._ids.new(kind), kind, label,  # type: ignore[arg-type]
                                                started_at=trio.current_time()))
        self._event(item, "started")
        return item

    def finish(self, task_id: str, *, state: str = "completed", text: str, exit_code: int | None = None,
               notify: bool = True) -> bool:
        """End tracked work: record its state and (by default) post its terminal notification."""
        item = self.registry.get(task_id)
        if item is None or not item.live:
            return False
        item.state, item.exit_code, item.ended_at = state, exit_code, trio.current_time()
        self._event(item, "finished")
        if notify:
            self.notify(item, text)
        return True

    def report_output(self, task_id: str, text: str, *, truncated: int | None = None) -> bool:
        """Publish output of tracked work (:meth:`track`) as its ``background_task`` ``output`` event, as given:
        ``text`` already bounded, ``truncated`` how many characters were left out of it (a replay plays
        recorded output this way). ``False`` when there is no such live task."""
        item = self.registry.get(task_id)
        if item is None or not item.live:
            return False
        self._event(item, "output", text=text, **({"truncated": truncated} if truncated is not None else {}))
        return True

    # ------------------------------------------------------------- monitors

    async def start_monitor(self, *, command: str | None, follow: str | None, cwd: str,
                            timeout: float = m.DEFAULT_TIMEOUT) -> BackgroundItem:
        self._check_capacity()
        if follow is not None:
            followed = self.registry.get(follow)
            if followed is None or followed.kind != "shell" or not followed.live:
                raise LookupError(f"no running background shell {follow!r} to follow")
        task_id = self._ids.new("monitor")
        label = command if command is not None else f"follow {follow}"
        item = self.registry.add(BackgroundItem(task_id, "monitor", label, started_at=trio.current_time()))

        def deliver(text: str, final: bool) -> None:
            self._output_event(item, text)
            if final:
                item.state = "completed"
                item.ended_at = trio.current_time()
                self._event(item, "finished")
            self.notify(item, text, merge=True)

        monitor = m.Monitor(task_id, timeout=timeout, deliver=deliver)
        assert self._nursery is not None
        if follow is not None:
            def listen(text: str | None) -> None:
                monitor.source_ended() if text is None else monitor.feed(text)

            listeners = self._listeners.setdefault(follow, [])
            listeners.append(listen)

            async def followed(*, task_status: trio.TaskStatus[Any]) -> None:
                try:
                    await monitor.run(task_status=task_status)
                finally:
                    if listen in listeners:
                        listeners.remove(listen)  # a stopped monitor buffers nothing more

            item.actor = await self._nursery.start(followed)
        else:
            assert command is not None
            process = sh.ShellProcess(command, cwd, sh.OutputBuffer(64 * 1024), monitor.feed, sandbox=self.sandbox)
            try:
                await process.start()
            except OSError:
                item.state, item.ended_at = "failed", trio.current_time()
                raise

            async def commanded(*, task_status: trio.TaskStatus[Any]) -> None:
                # The command lives exactly as long as its monitor.
                async with trio.open_nursery() as inner:
                    async def feed() -> None:
                        try:
                            await process.run()
                            monitor.source_ended()
                        finally:
                            await process.kill_and_reap()

                    inner.start_soon(feed)
                    await monitor.run(task_status=task_status)
                    inner.cancel_scope.cancel()

            item.actor = await self._nursery.start(commanded)
        self._event(item, "started")
        return item

    # ------------------------------------------------------------- wakeups and cron

    async def schedule_wakeup(self, *, delay: float | None, at: datetime | None, note: str) -> BackgroundItem:
        self._check_capacity()
        if (delay is None) == (at is None):
            raise sch.ScheduleError("give exactly one of delay (seconds) or at (an ISO 8601 time)")
        try:
            when = at if at is not None else self._now() + timedelta(seconds=delay or 0)
        except (OverflowError, ValueError):
            raise sch.ScheduleError("delay is too large") from None
        record = {"op": "timer", "taskId": self._ids.new("wakeup"), "kind": "wakeup", "text": note,
                  "at": when.isoformat(), "recurring": False, "createdAt": self._now().isoformat()}
        return await self._start_timer(record, written=False)

    async def create_cron(self, schedule: str, prompt: str, recurring: bool) -> BackgroundItem:
        self._check_capacity()
        schedule = sch.parse_cron(schedule, self._now())
        record = {"op": "timer", "taskId": self._ids.new("cron"), "kind": "cron", "text": prompt,
                  "schedule": schedule, "recurring": recurring, "createdAt": self._now().isoformat()}
        return await self._start_timer(record, written=False)

    async def restore_timers(self, records: list[dict[str, Any]]) -> int:
        """Bring back the @wakeups and cron jobs a restart's journal still has scheduled (see
        :func:`actors.storage.journal.replay`), under their task ids. One whose time passed while no
        daemon ran fires once, at once; a recurring cron job then goes on from now. One whose schedule no
        longer fires has ended: it is journalled as ended, and the session goes on without it."""
        restored = 0
        for record in records:
            try:
                await self._start_timer(record, written=True)
                restored += 1
            except sch.NeverFires as exc:
                # A schedule that can never fire again (one an older daemon let in, such as "0 0 31 2 *"): it has
                # ended, and is written down as ended so that the next load does not try it again.
                log.error("session %s: timer %s ended, not restored: %s", self.session_id, record.get("taskId"), exc)
                if isinstance(record.get("taskId"), str):
                    await self._write_quietly({"op": "timer_ended", "taskId": record["taskId"]})
            except (sch.ScheduleError, ValueError, KeyError, TypeError) as exc:  # one it cannot read (a newer's?)
                log.error("session %s: timer %s not restored: %s", self.session_id, record.get("taskId"), exc)
        return restored

    async def _start_timer(self, record: dict[str, Any], *, written: bool) -> BackgroundItem:
        task_id, kind, text = record["taskId"], record["kind"], record["text"]
        recurring = bool(record.get("recurring"))
        if kind == "wakeup":
            when = datetime.fromisoformat(record["at"])
            label, next_time = text, sch.once_at(when)
            after: datetime | None = None
        else:
            counted_from = record.get("lastFired") or record.get("createdAt")
            after = datetime.fromisoformat(counted_from) if written and counted_from else None
            schedule = sch.parse_cron(record["schedule"], after or self._now())
            label, next_time = f"{schedule}: {text}", sch.cron_times(schedule, recurring)
        if not written:
            try:  # durable before it is announced: a restart, or a cluster's next owner, brings it back
                durable = self._append(record)
            except OSError as exc:
                raise sch.ScheduleError(f"cannot be kept: {exc}") from None
            self._timers[task_id] = record  # with its record (a compaction meanwhile snapshots it)
            try:
                if durable is not None:
                    await durable
            except OSError as exc:
                # Refused, though its record may be on disk (or in a compaction taken meanwhile): ended too.
                self._timers.pop(task_id, None)
                await self._write_quietly({"op": "timer_ended", "taskId": task_id})
                raise sch.ScheduleError(f"cannot be kept: {exc}") from None
        else:
            self._timers[task_id] = record
        item = self.registry.add(BackgroundItem(task_id, kind, label, state="scheduled",  # type: ignore[arg-type]
                                                started_at=trio.current_time()))

        async def fire() -> None:
            one_shot = kind == "wakeup" or not recurring
            before = self._timers.get(task_id)
            try:  # durable before it is queued, so a takeover does not fire it a second time
                durable = self._append({"op": "timer_fired", "taskId": task_id, "at": self._now().isoformat()})
            except OSError as exc:  # this node lost the session (or its storage): the next owner fires it
                log.error("session %s: %s %s not fired: %s", self.session_id, kind, task_id, exc)
                return
            if one_shot:  # gone with its record, in the same step (a compaction meanwhile snapshots the timers)
                self._timers.pop(task_id, None)
            try:
                if durable is not None:
                    await durable
            except OSError as exc:
                log.error("session %s: %s %s not fired: %s", self.session_id, kind, task_id, exc)
                if before is not None and item.state != "cancelled":
                    # Not fired, though its record may be on disk: the journal is told it is still due, as
                    # it was (last fire included), and so is a restart.
                    self._timers[task_id] = before
                    await self._write_quietly(before)
                return
            if item.state == "cancelled":  # killed while its record was being synced: not queued
                return
            if kind == "wakeup":
                item.state = "fired"
                item.ended_at = trio.current_time()
                self._event(item, "finished")
                self.post(AutomaticItem(self._ids.new("auto"), "wakeup", task_id, f"@wakeup: {text}"))
                return
            self._event(item, "output", text="fired")
            if not recurring:
                item.state = "fired"
                item.ended_at = trio.current_time()
                self._event(item, "finished")
            self.post(AutomaticItem(self._ids.new("auto"), "cron", task_id, text, recurring=recurring))

        async def failed(exc: Exception) -> None:
            # Its next time cannot be computed (Timer logged why): the timer has ended, as a kill ends it
            # (announced, written down), and the session goes on.
            if not item.live:
                return
            item.state = "failed"
            item.ended_at = trio.current_time()
            self._event(item, "finished")
            self._timers.pop(task_id, None)
            await self._write_quietly({"op": "timer_ended", "taskId": task_id})

        timer = sch.Timer(task_id, self._now, next_time, fire, after=after, on_failure=failed)
        assert self._nursery is not None
        item.actor = await self._nursery.start(timer.run)
        if kind == "wakeup":
            self._event(item, "started", at=record["at"])
        else:
            self._event(item, "started", schedule=record["schedule"], recurring=recurring)
        return item

    def timer_records(self) -> list[dict[str, Any]]:
        """The live timers' records, for a compacted journal (last fires kept)."""
        return [dict(r) for r in self._timers.values()]

    def _append(self, record: dict[str, Any]) -> Awaitable[None] | None:
        """Journal ``record`` now and note it in the live timers' records in the same step (a compaction's
        snapshot taken while its sync runs must see it); what makes it durable is returned, to await."""
        durable = self._journal(record) if self._journal is not None else None
        if record["op"] == "timer_fired" and record["taskId"] in self._timers:
            self._timers[record["taskId"]] = {**self._timers[record["taskId"]], "lastFired": record["at"]}
        return durable

    async def _write_quietly(self, record: dict[str, Any]) -> None:
        try:
            durable = self._append(record)
            if durable is not None:
                await durable
        except OSError as exc:
            log.error("session %s: %s", self.session_id, exc)

    # ------------------------------------------------------------- the automatic queue

    def post(self, item: AutomaticItem) -> Posted:
        posted = self.queue.post(item, self.related)
        if posted.evicted is not None:
            self._publish("background_task", wire.background_task(self.session_id, posted.evicted.task_id,
                                                                  "notification_dropped", reason="queue_full"))
        if not posted.accepted:
            self._publish("background_task", wire.background_task(self.session_id, item.task_id,
                                                                  "notification_dropped", reason="queue_full"))
        return posted

    def notify(self, item: BackgroundItem, text: str, *, merge: bool = False) -> None:
        """Queue a notification for the model; a monitor's batches merge into its queued one."""
        if merge:
            queued = next((q for q in self.queue.items if q.is_notification and q.task_id == item.task_id), None)
            if queued is not None:
                joined = queued.text + "\n" + text
                if len(joined) > NOTIFICATION_TEXT_LIMIT:
                    joined = joined[-NOTIFICATION_TEXT_LIMIT:]
                queued.text = joined
                queued.status = item.state  # a monitor's last batch: it ended
                return
        if len(text) > NOTIFICATION_TEXT_LIMIT:
            text = text[:NOTIFICATION_TEXT_LIMIT] + f"\n[{len(text) - NOTIFICATION_TEXT_LIMIT} characters cut]"
        self.post(AutomaticItem(self._ids.new("auto"), "notification", item.task_id, text, kind=item.kind,
                                status=item.state, label=item.label))

    # ------------------------------------------------------------- helpers

    def _check_capacity(self) -> None:
        if len(self.registry.live()) >= MAX_LIVE_TASKS:
            raise BackgroundLimit(f"at most {MAX_LIVE_TASKS} live background tasks per session")

    def _output_event(self, item: BackgroundItem, text: str) -> None:
        """Output as an event, bounded: the ring is for watching, ``shell_output`` has it all.

        Bounded in bytes too (whole characters; ``truncated`` still counts characters): 1,024 4-byte characters
        cost 4 KiB as a str and 12 KiB as escaped JSON, and a session's ring keeps thousands of events.
        """
        shown = text[:OUTPUT_EVENT_LIMIT]
        if len(shown) * 4 > OUTPUT_EVENT_LIMIT and len(shown.encode("utf-8", "surrogatepass")) > OUTPUT_EVENT_LIMIT:
            shown = shown.encode("utf-8", "surrogatepass")[:OUTPUT_EVENT_LIMIT].decode("utf-8", "ignore")
        if len(shown) < len(text):
            self._event(item, "output", text=shown, truncated=len(text) - len(shown))
        else:
            self._event(item, "output", text=text)

    def _event(self, item: BackgroundItem, status: str, **extra: Any) -> None:
        fields: dict[str, Any] = {"kind": item.kind, "label": item.label}
        if status == "finished":
            fields["state"] = item.state
            if item.exit_code is not None:
                fields["exitCode"] = item.exit_code
        self._publish("background_task", wire.background_task(self.session_id, item.task_id, status, **fields,
                                                              **extra))
