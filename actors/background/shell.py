"""Shells: real subprocesses, each in its own process group.

A shell's output goes into an :class:`OutputBuffer` (bounded in UTF-8 bytes,
per shell and per session through an :class:`OutputBudget`; a reader gets only
what is new since its last read, and how many bytes were dropped before it). :class:`ShellProcess` runs one command
to its end; :class:`ShellTask` is the actor that runs one in the background and
answers ``Kill`` — ending the whole process group, grandchildren included.
Whatever way the actor stops (its session closed, the daemon stopped), its
process group is killed on the way out, so nothing is left behind.

A process group does not hold what left it (``setsid``, a double fork), so
every command also carries a marker of its own in its environment
(:mod:`actors.process.markers`): each kill path, after the group, kills
every process with that marker too. A command's processes live no longer
than its shell — or, in the background, than its actor.
"""

from __future__ import annotations

import codecs
import os
import signal
import sys
import weakref
from collections.abc import Callable, Iterable

import attrs
import trio

from .._actor import ActorRef, Reply, open_mailbox, serve_mailbox
from ..process import (NO_SANDBOX, Child, Sandbox, allowed_environment, kill_task, kill_task_now, marked_environment,
                       require_executable, spawn_child)
from ..telemetry import count_process

# Output is kept as UTF-8 bytes and bounded in bytes: a str of 4-byte characters costs 4 bytes a character, so a
# bound in characters let one shell hold 16 MiB and one model response (256 shells) about 4 GiB.
OUTPUT_LIMIT = 1024 * 1024  # bytes of output kept per shell: its newest
SESSION_OUTPUT_LIMIT = 16 * 1024 * 1024  # bytes kept by all of one session's shells together
DRAIN_AFTER_EXIT = 0.5  # seconds to read what is still in the pipe once the shell exited
KILL_GRACE = 2.0  # seconds between SIGTERM and SIGKILL


def _is_continuation(byte: int) -> bool:
    return byte & 0xC0 == 0x80


class OutputBudget:
    """The bytes of output one session's shells keep together, at most :attr:`limit`.

    Past it, the buffer that holds the most gives up its oldest output first (so each keeps a fair share,
    the newest of it), down to 7/8 of the limit: the next trim is 1/8 of the limit of output away, not one
    chunk. A buffer's bytes leave the budget when it is trimmed, or garbage-collected with its shell.
    """

    def __init__(self, limit: int = SESSION_OUTPUT_LIMIT) -> None:
        self.limit = limit
        self.used = 0
        self._buffers: weakref.WeakSet[OutputBuffer] = weakref.WeakSet()

    def join(self, buffer: OutputBuffer) -> None:
        self._buffers.add(buffer)
        weakref.finalize(buffer, self._leave, buffer._kept).atexit = False

    def _leave(self, kept: list[int]) -> None:
        self.used -= kept[0]

    def settle(self) -> None:
        """Trim the largest buffers to one level until the budget holds (called by a buffer that grew past it)."""
        excess = self.used - (self.limit - self.limit // 8)
        if excess <= 0:
            return
        buffers = sorted(self._buffers, key=lambda b: b.kept, reverse=True)
        # The level L that the k largest come down to: what they hold above it is the excess.
        held = 0
        for k, buffer in enumerate(buffers, 1):
            held += buffer.kept
            below = buffers[k].kept if k < len(buffers) else 0
            if held - k * below >= excess:
                level = (held - excess) // k
                for larger in buffers[:k]:
                    larger.drop(larger.kept - level)
                return


class OutputBuffer:
    """Append-only text with a bounded tail and a read cursor for incremental reads.

    Kept as UTF-8 bytes in one ``bytearray`` (no per-chunk objects: a shell printing one byte at a time costs
    what it prints), at most ``limit`` bytes, and within ``budget`` when one is given (a session's). Offsets
    and what was dropped are counted in bytes; the front is trimmed at a character boundary.
    """

    def __init__(self, limit: int = OUTPUT_LIMIT, budget: OutputBudget | None = None) -> None:
        self._data = bytearray()
        self._start = 0  # absolute offset of the first kept byte
        self._end = 0  # absolute offset after the last byte
        self._cursor = 0  # absolute offset of the first unread byte
        self._limit = limit
        self._kept = [0]  # len(self._data), in a cell the budget's finalizer can read once this buffer is gone
        self._budget = budget
        if budget is not None:
            budget.join(self)

    @property
    def total(self) -> int:
        """Bytes written so far, kept or not."""
        return self._end

    @property
    def kept(self) -> int:
        return len(self._data)

    @property
    def dropped(self) -> int:
        """Bytes dropped to the bounds so far."""
        return self._start

    def append(self, text: str) -> None:
        if not text:
            return
        data = text.encode("utf-8", "surrogatepass")
        self._end += len(data)
        if len(data) >= self._limit:  # only its newest part can be kept: never hold all of it, even briefly
            keep = self._limit
            while keep > 0 and _is_continuation(data[len(data) - keep]):
                keep -= 1
            self._data[:] = data[len(data) - keep:]
            self._start = self._end - keep
        else:
            self._data += data
            if len(self._data) > self._limit:
                self._drop(len(self._data) - self._limit)
        self._account()
        if self._budget is not None and self._budget.used > self._budget.limit:
            self._budget.settle()

    def drop(self, n: int) -> None:
        """Drop at least ``n`` of the oldest bytes (up to the next character boundary), at most all, and give
        the memory back (the budget counts what is kept, so what is allocated must follow it)."""
        self._drop(n)
        if sys.getsizeof(self._data) > len(self._data) + len(self._data) // 4 + 4096:  # its allocation, dropped front
            self._data = bytearray(self._data)  # included: a copy is exactly as large as what it keeps
        self._account()

    def _drop(self, n: int) -> None:
        n = min(max(n, 0), len(self._data))
        while n < len(self._data) and _is_continuation(self._data[n]):
            n += 1
        del self._data[:n]  # cheap: a bytearray moves its start, not its bytes
        self._start += n

    def _account(self) -> None:
        change = len(self._data) - self._kept[0]
        self._kept[0] = len(self._data)
        if self._budget is not None:
            self._budget.used += change

    def read_new(self) -> tuple[str, int]:
        """Everything written since the last read, and how many bytes were lost to the bounds."""
        lost = max(0, self._start - self._cursor)
        new = bytes(self._data[max(0, self._cursor - self._start):])
        self._cursor = self._end
        return new.decode("utf-8", "replace"), lost

    def tail(self, n: int = 4000) -> str:
        """The last ``n`` characters kept (at most)."""
        return bytes(self._data[-4 * n:]).decode("utf-8", "replace")[-n:]


# Credentials of the daemon itself and of its model: commands the model runs never see them
# (a model-run `env` would print them into events, the transcript and the next request).
WITHHELD = frozenset({"TRELLIS_TOKEN", "OPENAI_API_KEY"})


def model_environment() -> dict[str, str]:
    """What a model-run command inherits: the allowlist only (``PATH``, ``HOME``, ``LANG``, ``LC_*`` ...).

    Not the rest of the daemon's environment, which holds the user's tokens
    (``GITHUB_TOKEN``, cloud keys); the ``sandbox.env`` setting adds names on top
    (:meth:`actors.process.Sandbox.environment`), sandbox or not.
    """
    return allowed_environment(os.environ)


def user_environment() -> dict[str, str]:
    """The daemon's environment minus its own and its model's credentials: for the user's own commands (hooks)."""
    return {k: v for k, v in os.environ.items() if k not in WITHHELD}


def kill_group(pid: int, sig: int = signal.SIGKILL) -> None:
    """Signal a whole process group; a group that is already gone is fine."""
    try:
        os.killpg(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


class ShellProcess:
    """One command in its own process group, in ``sandbox``, read to the end.

    ``expose`` names files outside the cwd the command may read (a subagent's
    own MCP config file) although the sandbox hides where they lie.
    """

    def __init__(self, command: str, cwd: str, output: OutputBuffer,
                 on_output: Callable[[str], None] = lambda _: None, *,
                 sandbox: Sandbox = NO_SANDBOX, expose: Iterable[str] = ()) -> None:
        self.command = command
        self.cwd = cwd
        self.output = output
        self.sandbox = sandbox
        self.expose = tuple(expose)
        self._on_output = on_output
        self.process: Child | None = None
        self.task: str | None = None  # the TRELLIS_TASK marker of the started command
        self._reaped = False  # killed, swept and reaped after the shell exited: nothing of it can be left

    def argv(self) -> list[str]:
        return ["/bin/sh", "-c", self.command]

    async def start(self) -> None:
        """Start the command; ``OSError`` when it cannot start (the sandbox's refusals included)."""
        # The one cancel point comes before the fork: once the command exists, start() returns it, so
        # the caller's kill path owns it (a Cancelled raised after the fork would leak it).
        await trio.lowlevel.checkpoint_if_cancelled()
        argv = self.argv()
        env, self.task = marked_environment(self.sandbox.environment(model_environment()))
        sandboxed = "yes" if self.sandbox.active else "no"
        try:
            if self.sandbox.active:
                require_executable(argv[0], self.cwd, env)
            self.process = spawn_child(self.sandbox.wrap(argv, self.cwd, expose=self.expose), self.cwd, env)
        except OSError:
            count_process("sandbox_spawns", f"{sandboxed}:failed")
            raise
        count_process("sandbox_spawns", f"{sandboxed}:started")

    async def run(self) -> int:
        """Read output until the shell exits (and its pipe drains); returns the exit code."""
        assert self.process is not None and self.process.stdout is not None
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        code: int | None = None

        async def read() -> None:
            async for chunk in self.process.stdout:  # type: ignore[union-attr]
                self._emit(decoder.decode(chunk))
            self._emit(decoder.decode(b"", final=True))

        async with trio.open_nursery() as nursery:
            reading = trio.CancelScope()

            async def reader() -> None:
                with reading:
                    await read()

            nursery.start_soon(reader)
            code = await self.process.wait()
            # A grandchild may hold the pipe open: read what is there, then stop waiting for it.
            reading.deadline = trio.current_time() + DRAIN_AFTER_EXIT
        return code

    def _emit(self, text: str) -> None:
        if text:
            self.output.append(text)
            self._on_output(text)

    async def terminate(self) -> None:
        """SIGTERM the group, then SIGKILL it and everything with the command's marker after a grace period."""
        if self.process is None:
            return
        kill_group(self.process.pid, signal.SIGTERM)
        with trio.move_on_after(KILL_GRACE):
            await self.process.wait()
        await self.kill_and_reap()

    def kill_now(self) -> None:
        """SIGKILL the group and everything with the command's marker (blocks for one scan of ``/proc``)."""
        if self.process is not None:
            kill_group(self.process.pid, signal.SIGKILL)
            if self.task is not None:
                kill_task_now(self.task)

    async def kill_and_reap(self) -> None:
        """SIGKILL the group and everything with the command's marker, and reap the shell.

        Runs to its end even from a cancelled scope; once it has, with the
        shell reaped, calling it again does nothing.
        """
        if self.process is None or self._reaped:
            return
        with trio.CancelScope(shield=True):
            kill_group(self.process.pid, signal.SIGKILL)
            if self.task is not None:
                await kill_task(self.task)  # after the group: what left it (setsid, double forks)
            with trio.move_on_after(2):
                await self.process.wait()
            self._reaped = self.process.returncode is not None


# ----------------------------------------------------------------- the actor


@attrs.frozen
class Kill:
    reply: Reply[bool]


class ShellTask:
    """A background shell actor. Output is read from :attr:`output`; ``Kill`` ends the group."""

    def __init__(self, task_id: str, command: str, cwd: str, *,
                 on_output: Callable[[str], None], on_exit: Callable[[int | None, bool], None],
                 sandbox: Sandbox = NO_SANDBOX, budget: OutputBudget | None = None) -> None:
        self.task_id = task_id
        self.output = OutputBuffer(budget=budget)
        self.shell = ShellProcess(command, cwd, self.output, on_output, sandbox=sandbox)
        self._on_exit = on_exit
        self._killed = False
        self._kill_replies: list[Reply[bool]] = []  # answered once the group is gone
        self._scope = trio.CancelScope()

    async def run(self, *, task_status: trio.TaskStatus[ActorRef[Kill]] = trio.TASK_STATUS_IGNORED) -> None:
        ref, inbox = open_mailbox(f"shell:{self.task_id}", 8)
        code: int | None = None
        try:
            await self.shell.start()
            async with trio.open_nursery() as nursery:
                task_status.started(ref)
                nursery.start_soon(serve_mailbox, inbox, self._handle)
                with self._scope:
                    code = await self.shell.run()
                if self._killed:
                    with trio.CancelScope(shield=True):
                        await self.shell.terminate()
                        assert self.shell.process is not None
                        code = self.shell.process.returncode
                nursery.cancel_scope.cancel()
        finally:
            await self.shell.kill_and_reap()  # a closing session leaves no process behind
        self._on_exit(code, self._killed)
        for reply in self._kill_replies:
            reply.send(True)

    def _handle(self, message: Kill) -> None:
        match message:
            case Kill(reply):
                self._killed = True
                self._scope.cancel()
                self._kill_replies.append(reply)
