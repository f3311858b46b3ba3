"""Keeping the bearer token and the model API key out of the daemon's own process image.

Commands the model runs (shells, monitors, hooks, subagent CLIs) are the
daemon's descendants, running as the same user: they can read
``/proc/$PPID/environ`` and ``/proc/$PPID/cmdline``. Withholding
``TRELLIS_TOKEN`` and ``OPENAI_API_KEY`` from the commands' own environment is
not enough: ``/proc/<pid>/environ`` shows the block the process was *started*
with (deleting a variable from ``os.environ`` later changes nothing there), and
``cmdline`` shows the values of ``--token`` and ``--openai-api-key`` as typed.

So ``python -m transport`` (the HTTP daemon and ``acp`` alike) that finds one of
these in its environment or arguments re-executes itself once, before doing
anything else: same pid, same stdio, same working directory, but with an
environment and an argument list that hold no secret. The values cross the
``execve`` through a pipe: they are written into it (a few hundred bytes fit
the pipe buffer, so nothing waits for a reader), the write end is closed, and
the read end is inherited under the internal flag ``--secrets-fd N``. The
re-executed process reads and closes it at once; from then on the values live
only in memory (``args.token``, ``args.openai_api_key``, and an environment
overlay handed to where the environment is read), never in ``os.environ``, so
no later child inherits them either.

Only ``__main__`` re-executes (:func:`reexec_without_secrets`): code that calls
:func:`transport.cli.main` in-process is never replaced.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import orjson

# The cluster's store and events URLs may carry passwords (postgresql://user:password@host/db).
SECRET_ENV = ("TRELLIS_TOKEN", "OPENAI_API_KEY", "TRELLIS_STORE", "TRELLIS_EVENTS")
SECRET_FLAGS = {"--token": "token", "--openai-api-key": "openai_api_key",  # flag -> argparse dest
                "--store": "store", "--events": "events"}
SECRETS_FD_FLAG = "--secrets-fd"
MAX_PAYLOAD = 4096  # PIPE_BUF: even a pipe shrunk to one page takes it without a reader


class SecretsError(RuntimeError):
    """The secrets could not be handed over (or taken back); the message says what was wrong."""


@dataclass(frozen=True)
class Secrets:
    """Values withheld from the process image: environment variables and flag values (by argparse dest)."""

    environ: Mapping[str, str] = field(default_factory=dict)
    flags: Mapping[str, str] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.environ or self.flags)

    def __repr__(self) -> str:  # names only: a repr ends up in logs and tracebacks
        return f"Secrets(environ={sorted(self.environ)}, flags={sorted(self.flags)})"

    def overlay(self, environ: Mapping[str, str]) -> dict[str, str]:
        """``environ`` with the withheld variables put back (for reading, never for a child's environment)."""
        return {**environ, **self.environ}

    def encode(self) -> bytes:
        return orjson.dumps({"environ": dict(self.environ), "flags": dict(self.flags)})

    @classmethod
    def decode(cls, data: bytes) -> Secrets:
        try:
            payload = orjson.loads(data)
        except orjson.JSONDecodeError:
            raise SecretsError("the secrets payload is not JSON") from None
        if not isinstance(payload, dict) or set(payload) != {"environ", "flags"}:
            raise SecretsError("the secrets payload must be an object with 'environ' and 'flags'")
        allowed = {"environ": set(SECRET_ENV), "flags": set(SECRET_FLAGS.values())}
        for key, names in allowed.items():
            part = payload[key]
            if not isinstance(part, dict) or not all(isinstance(v, str) for v in part.values()):
                raise SecretsError(f"the secrets payload's {key!r} must map names to strings")
            if unknown := set(part) - names:
                raise SecretsError(f"the secrets payload's {key!r} has unknown names {sorted(unknown)}")
        return cls(environ=payload["environ"], flags=payload["flags"])


def withhold(argv: Sequence[str], environ: Mapping[str, str]) -> tuple[list[str], dict[str, str], Secrets]:
    """Split the secrets off ``argv`` and ``environ``: ``(clean argv, clean environment, secrets)``.

    Recognises ``--token VALUE``, ``--token=VALUE`` and the same for
    ``--openai-api-key`` (the parser takes no abbreviations, so no other spelling
    reaches it); the last one given wins, as with argparse. A flag with no value
    after it is left in place for argparse to report.
    """
    clean: list[str] = []
    flags: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        name, eq, value = arg.partition("=")
        if name in SECRET_FLAGS and eq:
            flags[SECRET_FLAGS[name]] = value
        elif arg in SECRET_FLAGS and i + 1 < len(argv):
            flags[SECRET_FLAGS[arg]] = argv[i + 1]
            i += 1
        else:
            clean.append(arg)
        i += 1
    env = {k: v for k, v in environ.items() if k not in SECRET_ENV}
    withheld = {k: environ[k] for k in SECRET_ENV if k in environ}
    return clean, env, Secrets(environ=withheld, flags=flags)


# Options of the interpreter itself that take their value as the next argument.
_WITH_VALUE = frozenset({"-X", "-W", "--check-hash-based-pycs"})


def interpreter_options(orig_argv: Sequence[str] | None = None) -> list[str]:
    """The interpreter's own options this process started with (``-X dev``, ``-W error``, ``-I``, ``-O``):
    what ``sys.orig_argv`` holds before the module, script or command it runs."""
    args = list(sys.orig_argv if orig_argv is None else orig_argv)[1:]
    options: list[str] = []
    while args:
        arg = args.pop(0)
        if not arg.startswith("-") or arg == "-" or arg.startswith(("-m", "-c")):
            break
        options.append(arg)
        if arg in _WITH_VALUE and args:
            options.append(args.pop(0))
    return options


def reexec_without_secrets(argv: Sequence[str], *, module: str = "transport") -> None:
    """Replace this process with ``python -m <module>`` minus its secrets, if it holds any.

    Returns (doing nothing) when neither ``argv`` nor the environment holds a
    secret, which is also the case in the re-executed process. Raises
    :class:`SecretsError` when the hand-over cannot be done.
    """
    clean_argv, clean_env, secrets = withhold(argv, os.environ)
    if not secrets:
        return
    if any(arg == SECRETS_FD_FLAG or arg.startswith(SECRETS_FD_FLAG + "=") for arg in clean_argv):
        # Only a re-executed process has --secrets-fd, and it has no secret left to withhold.
        raise SecretsError(f"{SECRETS_FD_FLAG} is internal: it cannot come with $TRELLIS_TOKEN, $OPENAI_API_KEY, "
                           "--token or --openai-api-key")
    if not sys.executable:
        raise SecretsError("cannot re-execute without the secrets: sys.executable is unknown")
    payload = secrets.encode()
    if len(payload) > MAX_PAYLOAD:
        raise SecretsError(f"the token and API key are too long to hand over (over {MAX_PAYLOAD} bytes)")
    read_fd, write_fd = os.pipe()
    try:
        os.write(write_fd, payload)  # fits the pipe buffer: returns at once, whole
    finally:
        os.close(write_fd)  # the reader sees end of file after the payload
    os.set_inheritable(read_fd, True)
    # The interpreter's own options (-X, -W, -I, ...) carry over; the rest of sys.orig_argv is what we rebuild.
    command = [sys.executable, *interpreter_options(), "-m", module,
               *clean_argv, SECRETS_FD_FLAG, str(read_fd)]
    for stream in (sys.stdout, sys.stderr):
        if stream is not None:
            stream.flush()
    try:
        os.execve(sys.executable, command, clean_env)
    except OSError as exc:
        os.close(read_fd)
        raise SecretsError(f"cannot re-execute {sys.executable} without the secrets: {exc.strerror or exc}") from None


def read_secrets(fd: int) -> Secrets:
    """Take the secrets back from the pipe ``fd`` a :func:`reexec_without_secrets` left; closes it."""
    where = f"{SECRETS_FD_FLAG} {fd}"
    if fd <= 2:
        raise SecretsError(f"{where}: a standard stream cannot carry the secrets")
    try:
        mode = os.fstat(fd).st_mode
    except OSError as exc:
        raise SecretsError(f"{where}: not an open file descriptor ({exc.strerror})") from None
    try:
        if not stat.S_ISFIFO(mode):
            raise SecretsError(f"{where}: not a pipe")
        # The writer finished before the exec, so everything (and the end of file) is there already;
        # non-blocking, a pipe somebody still holds open for writing is an error rather than a hang.
        os.set_blocking(fd, False)
        data = b""
        while True:
            try:
                chunk = os.read(fd, MAX_PAYLOAD + 1)
            except BlockingIOError:
                raise SecretsError(f"{where}: the pipe is still open for writing") from None
            if not chunk:
                break
            data += chunk
            if len(data) > MAX_PAYLOAD:
                raise SecretsError(f"{where}: more than {MAX_PAYLOAD} bytes")
    except OSError as exc:
        raise SecretsError(f"{where}: cannot read the secrets ({exc.strerror})") from None
    finally:
        os.close(fd)
    return Secrets.decode(data)


PR_SET_DUMPABLE = 4


def make_undumpable() -> bool:
    """Forbid same-user processes to read this one's memory (``/proc/<pid>/mem``, ptrace); ``False`` if not Linux.

    The environment and command line hold no secret after the re-exec, but the
    token and the API key are still in memory: without the sandbox, a command
    the model runs has the daemon's uid and, where Yama's ptrace_scope allows,
    could read them from ``/proc/$PPID/mem``. A process that is not dumpable
    cannot be ptraced or have its memory read by other unprivileged processes
    (and leaves no core dump with the token in it). Children get their own
    dumpable flag back at ``execve``.
    """
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    return libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
