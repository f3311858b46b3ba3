"""``python -m transport``: run the daemon."""

from __future__ import annotations

import argparse
import gc
import os
import signal
import socket
import sys
import threading
from collections.abc import Mapping
from contextlib import AsyncExitStack
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import trio

from actors import (
    Daemon, SandboxUnavailable, ScriptError, Settings, SettingsError, load_script, load_settings, open_daemon,
)
from actors.loop_stalls import StallWatch
from actors.model import ModelProvider, ScriptedModel

from .auth import TokenFileError, token_path
from .hosts import parse_authority
from .logs import add_secret, configure
from .logs import say as log_line
from .process_image import Secrets, SecretsError, read_secrets
from .server import InsecureBind, check_bind, is_loopback, serve

DEFAULT_PORT = 4170
SHUTDOWN_SIGNALS = (signal.SIGTERM, signal.SIGINT)
FORCED_EXIT_SECONDS = 3.0  # after a forced shutdown, how long Trio may unwind before the process exits anyway
GC_YOUNG_THRESHOLD = 10_000  # allocations between young collections (CPython's default: 700)
SERVER_CLOSE_SECONDS = 3.0  # once every session closed, how long the HTTP server may take to close


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m transport",
        description="Trellis daemon: LLM agent sessions over REST + SSE (qwen serve compatible) and ACP at /acp. "
                    "`python -m transport acp [flags]` runs the ACP agent on stdio instead.",
        # No abbreviations: transport.process_image must recognise every spelling of --token and
        # --openai-api-key to keep their values out of /proc/<pid>/cmdline.
        allow_abbrev=False,
    )
    net = p.add_argument_group("network")
    net.add_argument("--hostname", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback)")
    net.add_argument("--port", type=int, default=DEFAULT_PORT,
                     help=f"port to bind (default {DEFAULT_PORT}; 0 picks a free port and prints it)")
    net.add_argument("--token", default=None,
                     help="bearer token clients must send (default: $TRELLIS_TOKEN, else a fresh one minted at "
                          "each start into STATE_DIR/token, mode 0600)")
    net.add_argument("--no-auth", action="store_true",
                     help="serve without any token (loopback binds only; any local process can then drive "
                          "the daemon)")
    net.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                     help="browser origin allowed besides the daemon's own http://HOST:PORT (repeatable)")
    net.add_argument("--allow-host", action="append", default=[], metavar="HOST[:PORT]",
                     help="Host header accepted besides the bound address and localhost with the bound port "
                          "(repeatable; no PORT means the bound port); other Hosts get 421")
    net.add_argument("--acp-grace", type=float, default=10.0, metavar="SECONDS",
                     help="how long a dropped /acp session stream keeps its prompt and permissions (default 10)")
    state = p.add_argument_group("state")
    state.add_argument("--workspace", default=None, help="default working directory of new sessions (default: cwd)")
    state.add_argument("--settings", default=None, metavar="FILE", help="JSON settings file")
    state.add_argument("--state-dir", default=None, metavar="DIR",
                       help="where transcripts are kept (default: ./.trellis)")
    model = p.add_argument_group("model")
    model.add_argument("--model", choices=["scripted", "openai"], default=None,
                       help="primary model provider (default: settings model.provider, else scripted, "
                            "the embedded demo model)")
    model.add_argument("--script", default=None, metavar="FILE", help="script for the scripted model (JSON)")
    model.add_argument("--openai-base-url", default=None, metavar="URL",
                       help="OpenAI-compatible endpoint (default: $OPENAI_BASE_URL, then settings model.baseUrl)")
    model.add_argument("--openai-model", default=None, metavar="NAME",
                       help="model name (default: $OPENAI_MODEL, then settings model.name)")
    model.add_argument("--openai-api-key", default=None, metavar="KEY",
                       help="API key (prefer $OPENAI_API_KEY: a flag shows in the process list)")
    model.add_argument("--context-window", type=int, default=None, metavar="TOKENS",
                       help="context window; larger requests are refused before sending (stop reason max_tokens)")
    model.add_argument("--max-tokens", type=int, default=None, metavar="TOKENS", help="max_tokens per model call")
    model.add_argument("--model-connect-timeout", type=float, default=None, metavar="SECONDS",
                       help="connect timeout (default 10)")
    model.add_argument("--model-read-timeout", type=float, default=None, metavar="SECONDS",
                       help="longest silence between two reads of a stream (default 120)")
    model.add_argument("--model-retries", type=int, default=None, metavar="N",
                       help="retries of 429/5xx/connection errors before a stream is returned (default 0)")
    model.add_argument("--text-tool-calls", choices=["off", "hermes", "json"], default=None,
                       help="turn tool calls the model writes as text into calls (default: settings "
                            "model.textToolCalls, else off); for servers without a tool-call parser")
    cluster = p.add_argument_group("cluster (several daemons sharing sessions: docs/cluster.md)")
    cluster.add_argument("--store", default=None, metavar="postgresql://…",
                         help="keep sessions in this PostgreSQL database, shared with the other nodes (default: "
                              "$TRELLIS_STORE; without it, local files under STATE_DIR)")
    cluster.add_argument("--events", default=None, metavar="redis://…",
                         help="carry live events and wake-ups through this Redis (default: $TRELLIS_EVENTS); "
                              "needed with --store")
    cluster.add_argument("--node-id", default=None, metavar="NAME",
                         help="this node's name in the cluster (default: the host name and port)")
    cluster.add_argument("--advertise-url", default=None, metavar="URL",
                         help="the URL other nodes reach this one at (default: the bound http://HOST:PORT)")
    cluster.add_argument("--lease-seconds", type=float, default=None, metavar="SECONDS",
                         help="how long a silent node keeps its sessions before another takes them (default 5)")
    limits = p.add_argument_group("limits")
    limits.add_argument("--max-sessions", type=int, default=None, help="sessions per daemon (default 256)")
    limits.add_argument("--max-pending-prompts", type=int, default=None,
                        help="queued + running prompts per session (default 32)")
    limits.add_argument("--event-ring-size", type=int, default=None, help="events kept per session (default 8000)")
    limits.add_argument("--max-connections", type=int, default=None,
                        help="open HTTP connections, idle keep-alive ones included; more are answered 503 "
                             "too_many_connections (default: settings limits.maxConnections, else 256)")
    modes = p.add_argument_group("modes")
    modes.add_argument("--safe-mode", action="store_true", default=None, help="safe mode (forces the Todo Stop Guard off)")
    modes.add_argument("--bare", action="store_true", default=None, help="bare mode (forces the Todo Stop Guard off)")
    modes.add_argument("--sandbox", choices=["auto", "bwrap", "off"], default=None,
                       help="where model-run commands run (default: settings sandbox, else auto = bubblewrap when "
                            "it works here; bwrap = refuse to start without it; off = with your rights)")
    p.add_argument("--report-loop-stalls", type=float, default=None, metavar="MS",
                   help="time every event-loop task step once listening: warn of each that held the loop over MS "
                        "milliseconds (wall time less run-queue delay) and report the longest at exit (off by default)")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                   help="log verbosity on stderr (default warning; info adds a line per request and per turn)")
    p.add_argument("--log-format", default="text", choices=["text", "json"],
                   help="log lines on stderr as text (default) or one JSON object per line")
    # Internal: the pipe through which a re-executed daemon takes back its token and API key
    # (transport.process_image); never typed by hand.
    p.add_argument("--secrets-fd", type=int, default=None, metavar="FD", help=argparse.SUPPRESS)
    return p


def recover_secrets(parser: argparse.ArgumentParser, args: argparse.Namespace,
                    secrets: Secrets | None = None) -> Mapping[str, str]:
    """Put withheld secrets back into ``args``; returns the environment to read settings from.

    The secrets come from ``--secrets-fd`` (a re-executed ``python -m transport``)
    or from ``secrets``. The returned mapping is ``os.environ`` plus the withheld
    variables; ``os.environ`` itself stays without them, so no child inherits them.
    """
    if args.secrets_fd is not None:
        try:
            secrets = read_secrets(args.secrets_fd)
        except SecretsError as exc:
            parser.error(str(exc))
    secrets = secrets or Secrets()
    for dest, value in secrets.flags.items():
        if getattr(args, dest) is None:  # a flag still on the command line wins, as argparse would have it
            setattr(args, dest, value)
    return secrets.overlay(os.environ)


def _positive(parser: argparse.ArgumentParser, name: str, value: int | None) -> None:
    if value is not None and value < 1:
        parser.error(f"{name} must be a positive integer")


def make_model(args: argparse.Namespace, settings: Settings,
               environ: Mapping[str, str] | None = None) -> ModelProvider:
    """The primary model; ``environ`` (default ``os.environ``) supplies ``OPENAI_*``."""
    provider = args.model or settings.model.get("provider", "scripted")
    if provider == "openai":
        from actors.model.openai import OpenAIConfig, OpenAIModel

        try:
            config = OpenAIConfig.from_sources(
                os.environ if environ is None else environ, settings.model, base_url=args.openai_base_url,
                model=args.openai_model, api_key=args.openai_api_key, context_window=args.context_window,
                max_tokens=args.max_tokens, connect_timeout=args.model_connect_timeout, read_timeout=args.model_read_timeout,
                max_retries=args.model_retries, text_tool_calls=args.text_tool_calls,
            )
        except ValueError as exc:
            raise SettingsError(f"{args.settings or 'settings'}: {exc}") from None
        for line in check_openai(args, settings, os.environ if environ is None else environ, config.api_key):
            say(line, "warning")
        return OpenAIModel(config)
    if provider != "scripted":
        raise SettingsError(f"{args.settings or 'settings'}: model.provider must be 'scripted' or 'openai'")
    if args.script:
        return load_script(args.script)
    return ScriptedModel()


def _given(flag: str | None, settings: Mapping[str, Any], key: str, environ: Mapping[str, str],
           var: str) -> tuple[str, str] | None:
    """(the value, where it came from) by the precedence of :meth:`OpenAIConfig.from_sources`; ``None`` if unset."""
    if flag:
        return flag, f"--openai-{'base-url' if key == 'baseUrl' else 'model'}"
    if isinstance(settings.get(key), str) and settings[key]:
        return settings[key], f"settings model.{key}"
    if environ.get(var):
        return environ[var], f"${var}"
    return None


def check_openai(args: argparse.Namespace, settings: Settings, environ: Mapping[str, str],
                 api_key: str | None) -> list[str]:
    """What the ``openai`` model needs to start: a base URL and a model name (``SettingsError`` naming the
    missing setting); returns warnings (no API key for a server off loopback)."""
    which = "--model openai" if args.model == "openai" else 'settings model.provider "openai"'
    base = _given(args.openai_base_url, settings.model, "baseUrl", environ, "OPENAI_BASE_URL")
    name = _given(args.openai_model, settings.model, "name", environ, "OPENAI_MODEL")
    missing = []
    if base is None:
        missing.append("a base URL: --openai-base-url URL, $OPENAI_BASE_URL or settings model.baseUrl "
                       "(e.g. http://127.0.0.1:8080/v1)")
    if name is None:
        missing.append("a model name: --openai-model NAME, $OPENAI_MODEL or settings model.name "
                       "(the name the server serves, e.g. qwen3)")
    if missing:
        raise SettingsError(f"{which} needs " + "; and ".join(missing))
    assert base is not None
    url, source = base
    try:
        parts = urlsplit(url)
        host = parts.hostname  # parsed here: an unclosed "[" raises
    except ValueError:
        parts, host = None, None
    if parts is None or parts.scheme not in ("http", "https") or not host:
        # Not echoed: a URL may carry credentials (user:password@host).
        raise SettingsError(f"{which}: the base URL ({source}) must be an http:// or https:// URL with a host "
                            "(e.g. http://127.0.0.1:8080/v1)")
    if not api_key and not is_loopback(parts.hostname):
        return [f"no API key for the model server at {parts.hostname}: requests go without Authorization "
                "(set $OPENAI_API_KEY or settings model.apiKey if it wants one)"]
    return []


def load_daemon_config(args: argparse.Namespace,
                       environ: Mapping[str, str] | None = None) -> tuple[Settings, ModelProvider] | None:
    """Settings and model from the parsed flags and ``environ`` (default ``os.environ``).

    Errors and warnings go to stderr; ``None`` on error.
    """
    try:
        settings = load_settings(
            args.settings, safe_mode=args.safe_mode, bare=args.bare, max_sessions=args.max_sessions,
            max_pending_prompts=args.max_pending_prompts, event_ring_size=args.event_ring_size,
            max_connections=args.max_connections, sandbox=args.sandbox,
        )
        key = settings.model.get("apiKey")
        add_secret(key if isinstance(key, str) else None)  # never in a log line (transport.logs)
        model = make_model(args, settings, environ)
    except (SettingsError, ScriptError) as exc:
        say(str(exc), "error")
        return None
    for warning in settings.warnings:
        say(warning, "warning")
    return settings, model


def configure_logging(args: argparse.Namespace, environ: Mapping[str, str]) -> None:
    """``--log-level`` and ``--log-format`` on stderr; the token and API key given are never written there."""
    configure(args.log_level, args.log_format, secrets=(
        args.token, environ.get("TRELLIS_TOKEN"), args.openai_api_key, environ.get("OPENAI_API_KEY"),
        *(_password(url) for url in (args.store, environ.get("TRELLIS_STORE"), args.events,
                                     environ.get("TRELLIS_EVENTS")))))


def _password(url: str | None) -> str | None:
    """The password in a ``scheme://user:password@host`` URL (so no log line carries it)."""
    try:
        return urlsplit(url).password or None if url else None
    except ValueError:  # not a URL at all: ClusterConfig refuses it, naming it
        return None


def cluster_config(parser: argparse.ArgumentParser, args: argparse.Namespace, environ: Mapping[str, str],
                   token: str | None, auth: bool, settings: Settings) -> Any:
    """The node's :class:`actors.cluster.node.ClusterConfig`, or ``None`` for a single daemon.

    Each value from its flag, else the environment (``$TRELLIS_STORE``, ``$TRELLIS_EVENTS``), else the
    settings' ``cluster`` group.
    """
    store = args.store or environ.get("TRELLIS_STORE") or settings.cluster_store
    events = args.events or environ.get("TRELLIS_EVENTS") or settings.cluster_events
    node_id = args.node_id or settings.cluster_node_id
    advertise_url = args.advertise_url or settings.cluster_advertise_url
    lease = args.lease_seconds if args.lease_seconds is not None else settings.cluster_lease_seconds
    for url in (settings.cluster_store, settings.cluster_events):
        add_secret(_password(url))  # the flags' and environment's are redacted already (configure_logging)
    if not store and not events:
        for flag in ("node_id", "advertise_url", "lease_seconds"):
            if getattr(args, flag) is not None:
                parser.error(f"--{flag.replace('_', '-')} is for cluster mode: it needs --store and --events")
        return None
    if not store or not events:
        parser.error("cluster mode needs both --store postgresql://… and --events redis://… "
                     "(or $TRELLIS_STORE and $TRELLIS_EVENTS)")
    if auth and not token:
        parser.error("cluster mode needs the token every node shares: pass --token or set $TRELLIS_TOKEN "
                     "(a minted one would differ from node to node)")
    from actors.cluster.node import ClusterConfig

    node_id = node_id or f"{socket.gethostname()}-{args.port if args.port else os.getpid()}"
    try:
        return ClusterConfig(store, events, node_id, advertise_url or "",
                             lease_seconds=lease if lease is not None else 5.0,
                             max_sessions=settings.limits.max_sessions)
    except ValueError as exc:
        parser.error(f"cluster: {exc}")


def say(line: str, level: str = "info") -> None:
    """One line on stderr, flushed, whatever the log level (the shutdown's stages): as it is, or as a JSON
    record with ``--log-format json`` (:func:`transport.logs.say`)."""
    log_line(line, level)


def _descendants(root: int) -> list[int]:
    """Every live process below ``root``, from /proc (empty where there is none)."""
    parents: dict[int, int] = {}
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            fields = stat.rsplit(b")", 1)[-1].split()
            if len(fields) > 1 and fields[0] != b"Z":
                parents[int(entry)] = int(fields[1])
    found: list[int] = []
    frontier = {root}
    while frontier:
        children = {pid for pid, parent in parents.items() if parent in frontier and pid not in found}
        found.extend(children)
        frontier = children
    return found


def kill_process_groups(root: int | None = None) -> int:
    """SIGKILL every process group (and process) below ``root`` (this process); how many groups.

    Every command the daemon starts leads its own process group, so this ends them
    with whatever they started in the same group; what left the group (``setsid``)
    dies with the sandbox's PID namespace, or, without the sandbox, by the run
    marker every command carries.
    """
    root = os.getpid() if root is None else root
    own = os.getpgid(0)
    groups: set[int] = set()
    for pid in _descendants(root):
        try:
            pgid = os.getpgid(pid)
        except OSError:
            continue
        if pgid != own and pgid not in groups:
            groups.add(pgid)
            try:
                os.killpg(pgid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    _kill_marked_run()  # what left the group and the tree (setsid, double forks) still carries our marker
    return len(groups)


def _kill_marked_run() -> int:
    """SIGKILL every process marked with this daemon's run id (:mod:`actors.process.markers`)."""
    try:
        from actors.process.markers import run_id
        from actors.process.reaper import RUN_VAR, kill_marked
    except ImportError:
        return 0
    try:
        return kill_marked(RUN_VAR, run_id())
    except OSError:
        return 0


class Shutdown:
    """SIGTERM and SIGINT: a graceful shutdown within ``bound`` seconds, then (or at a second signal) forced.

    Graceful: :meth:`actors.Daemon.shutdown_gracefully` (admission stops, running
    turns end ``cancelled``, background work is killed, every event stream gets its
    last events), then the HTTP server closes; the process exits 0. Forced:
    every process group below the daemon is killed, everything is cancelled, and the
    process exits 1 (at the latest :data:`FORCED_EXIT_SECONDS` later).
    """

    def __init__(self, bound: float) -> None:
        self.bound = bound
        self.daemon: Daemon | None = None
        self.node: Any = None  # cluster mode: drained (its sessions handed over) before the daemon stops
        self.root = trio.CancelScope()
        self.served = trio.Event()  # the HTTP server has closed
        self.signal_name: str | None = None
        self.forced = False
        self._nursery: trio.Nursery | None = None
        self._hard_exit: threading.Timer | None = None

    async def watch(self, signals: Any, nursery: trio.Nursery) -> None:
        """Read signals for the daemon's whole life: the first begins the shutdown, a second forces it."""
        self._nursery = nursery
        async for signum in signals:
            name = signal.Signals(signum).name
            if self.signal_name is None:
                self.signal_name = name
                nursery.start_soon(self._graceful, name)
            else:
                self.force(f"a second signal, {name}")

    async def _graceful(self, name: str) -> None:
        daemon = self.daemon
        assert daemon is not None and self._nursery is not None
        sessions = daemon.session_count
        if self.node is not None:
            say(f"draining ({name}): handing {sessions} session(s) over to the other nodes, running turns "
                f"given {self.bound:g} s to finish (a second signal stops at once)")
            try:
                await self.node.drain(self.bound)
            except OSError as exc:  # the database or Redis is gone: the leases run out instead
                say(f"drain incomplete ({exc}); the other nodes take the sessions once their leases run out",
                    "warning")
            sessions = daemon.session_count
        say(f"shutting down ({name}): refusing new work, cancelling the running turns and background work of "
            f"{sessions} session(s), within {self.bound:g} s (a second signal stops at once)")
        if not await daemon.shutdown_gracefully(self.bound):
            self.force(f"not stopped within {self.bound:g} s")
            return
        # Every session has closed, so nothing is left to kill; the HTTP server gives open requests up
        # to its graceful timeout (1 s) once the event streams had their last events.
        with trio.move_on_after(SERVER_CLOSE_SECONDS):
            await self.served.wait()
            self._nursery.cancel_scope.cancel()  # the signal watcher; the daemon's exit follows
            return
        self.force("the HTTP server did not close")

    def force(self, why: str) -> None:
        if self.forced:
            return
        self.forced = True
        self._hard_exit = threading.Timer(FORCED_EXIT_SECONDS, _exit_now, (1,))
        self._hard_exit.daemon = True
        self._hard_exit.start()
        groups = kill_process_groups()
        say(f"forced ({why}): killed {groups} process group(s); exiting 1")
        if self.daemon is not None:
            self.daemon.shutdown()  # no second graceful round on the way out of open_daemon
        self.root.cancel()

    def finished(self) -> None:
        if self._hard_exit is not None:
            self._hard_exit.cancel()

    def exit_code(self) -> int:
        """After the run: 1 when forced; 0 otherwise (saying ``stopped`` when a signal ended it)."""
        if self.forced:
            return 1
        if self.signal_name is not None:
            say("stopped")
        return 0


def _exit_now(code: int) -> None:
    sys.stderr.flush()
    os._exit(code)


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def main(argv: list[str] | None = None, *, secrets: Secrets | None = None, prog: str | None = None) -> int:
    """Run the daemon (or, for ``acp ...``, the ACP agent on stdio) until interrupted.

    ``secrets`` are values withheld from the process image (see
    :mod:`transport.process_image`); ``python -m transport`` hands them over
    through ``--secrets-fd`` instead.
    """
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["acp"]:
        from .acp import run_stdio  # `python -m transport acp`: the ACP agent on stdio, for editors

        return run_stdio(argv[1:], secrets=secrets, prog=prog)
    parser = build_parser()
    if prog:
        parser.prog = prog  # `trellis serve`
    args = parser.parse_args(argv)
    environ = recover_secrets(parser, args, secrets)
    for name in ("max_sessions", "max_pending_prompts", "event_ring_size", "max_connections", "context_window",
                 "max_tokens"):
        _positive(parser, "--" + name.replace("_", "-"), getattr(args, name))
    if not 0 <= args.port <= 65535:
        parser.error("--port must be from 0 to 65535")
    for allowed in args.allow_host:
        try:
            parse_authority(allowed)
        except ValueError as exc:
            parser.error(f"--allow-host: {exc}")
    if args.acp_grace <= 0:
        parser.error("--acp-grace must be a positive number of seconds")
    token = args.token or environ.get("TRELLIS_TOKEN") or None
    auth = not args.no_auth
    if not auth and token:
        parser.error("--no-auth turns authentication off, yet a token is given (--token or $TRELLIS_TOKEN): "
                     "drop one of them")
    configure_logging(args, environ)
    try:
        check_bind(args.hostname, auth, token_given=bool(token))
    except InsecureBind as exc:
        say(str(exc), "error")
        return 2
    loaded = load_daemon_config(args, environ)
    if loaded is None:
        return 2
    settings, model = loaded
    cluster = cluster_config(parser, args, environ, token, auth, settings)
    state_dir = Path(args.state_dir or ".trellis")
    if not auth:
        say("--no-auth: authentication is off; any local user or process can drive this daemon "
            "and the commands its sessions run", "warning")

    shutdown = Shutdown(settings.limits.shutdown_seconds)

    async def serving(daemon: Daemon, node: Any, *, task_status: trio.TaskStatus[str]) -> None:
        try:
            await serve(daemon, host=args.hostname, port=args.port, token=token, auth=auth,
                        allowed_origins=tuple(args.allow_origin), allowed_hosts=tuple(args.allow_host),
                        acp_grace=args.acp_grace, cluster=node, task_status=task_status)
        finally:
            shutdown.served.set()

    async def run() -> None:
        # Opened first, so a signal during start-up waits for the daemon and then stops it in order.
        with trio.open_signal_receiver(*SHUTDOWN_SIGNALS) as signals, shutdown.root:
            async with AsyncExitStack() as stack:
                node = None
                if cluster is not None:
                    from actors.cluster.open import open_cluster

                    node = await stack.enter_async_context(open_cluster(cluster))
                daemon = await stack.enter_async_context(open_daemon(
                    settings, model=model, state_dir=state_dir, workspace=args.workspace,
                    store=node.store if node is not None else None, sync_in_thread=True))
                shutdown.daemon = daemon
                if node is not None:
                    node.attach(daemon)
                    shutdown.node = node
                async with trio.open_nursery() as nursery:
                    url = await nursery.start(serving, daemon, node)
                    if node is not None:
                        await nursery.start(node.run, url)
                    if auth and token is None:  # serve minted one; name the file, never print the token
                        say(f"token: {token_path(state_dir)} (send it as Authorization: Bearer)")
                    print(f"listening on {url}", flush=True)
                    if watch is not None:
                        watch.arm()  # start-up (the app's routes compiled in one step) is not a stall
                    # What start-up made lives as long as the daemon: out of the collector's way, a full
                    # collection walks only what sessions made (a 30-40 ms loop stall becomes under 10 ms);
                    # and young collections come every 10,000 allocations, not 700, so fewer short-lived
                    # objects (a turn's events, requests) are promoted to be walked again later.
                    gc.freeze()
                    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
                    nursery.start_soon(shutdown.watch, signals, nursery)

    if args.report_loop_stalls is not None and args.report_loop_stalls < 0:
        parser.error("--report-loop-stalls must be a non-negative number of milliseconds")
    watch = StallWatch(args.report_loop_stalls, armed=False) if args.report_loop_stalls is not None else None
    try:
        trio.run(run, instruments=[watch] if watch else [])
    except KeyboardInterrupt:  # a SIGINT before the signals were ours
        return 0
    except SandboxUnavailable as exc:
        say(str(exc), "error")
        return 2
    except OSError as exc:  # cluster mode: PostgreSQL or Redis cannot be reached (the message says which)
        say(f"cannot start: {exc}", "error")
        return 2
    except BaseExceptionGroup as group:
        token_errors, rest = group.split(TokenFileError)
        if token_errors is not None and rest is None:
            say(str(_first_leaf(token_errors)), "error")
            return 2
        bind_errors, rest = group.split(OSError)
        if bind_errors is None or rest is not None:
            raise
        first = _first_leaf(bind_errors)
        say(f"cannot serve on {args.hostname}:{args.port}: {getattr(first, 'strerror', None) or first}", "error")
        return 1
    finally:
        shutdown.finished()
        if watch is not None:
            say(watch.report())
    return shutdown.exit_code()
