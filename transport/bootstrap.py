"""From the parsed command line and the environment to a running daemon.

:mod:`.cli` parses and checks the flags; this module turns them, with the
environment and the settings file, into what a daemon runs with — the withheld
secrets back (:func:`recover_secrets`), the log and what it must never show
(:func:`configure_logging`), the settings and the primary model
(:func:`load_daemon_config`, :func:`make_model`), a cluster node's configuration
(:func:`cluster_config`) — and runs it: :meth:`DaemonConfig.open` opens the
daemon (the ACP agent on stdio runs one too), :func:`run_daemon` serves it over
HTTP until a signal stops it (:mod:`.signals`).

What the flags, the environment and the settings cannot run with together is a
:class:`UsageError`, which the command line reports as its own.
"""

from __future__ import annotations

import argparse
import os
import socket
from collections.abc import Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, unquote, urlsplit

import attrs
import trio

from actors import (
    Daemon, SandboxUnavailable, ScriptError, Settings, SettingsError, load_script, load_settings, open_daemon,
    provider_from_settings,
)
from actors.loop_stalls import StallWatch
from actors.settings_file import user_settings_path
from actors.storage import StorageError
from actors.telemetry import configure_from_environment, include_content
from actors.model import ModelProvider
from actors.model.from_settings import Overrides

from .auth import TokenFileError, persisted_token, token_path
from .daemon_lock import HeldStateDir, StateDirInUse, hold_state_dir
from .gc_policy import FreezeSurvivors
from .logs import add_secret, configure, say
from .process_image import Secrets, SecretsError, read_secrets
from .server import InsecureBind, check_bind, serve
from .signals import Shutdown, shutdown_signals



class UsageError(Exception):
    """Flags, environment and settings that cannot run together; the command line reports it with its usage."""


def recover_secrets(args: argparse.Namespace, secrets: Secrets | None = None) -> Mapping[str, str]:
    """Put withheld secrets back into ``args``; returns the environment to read settings from.

    The secrets come from ``--secrets-fd`` (a re-executed ``python -m transport``)
    or from ``secrets``. The returned mapping is ``os.environ`` plus the withheld
    variables; ``os.environ`` itself stays without them, so no child inherits them.
    """
    if args.secrets_fd is not None:
        try:
            secrets = read_secrets(args.secrets_fd)
        except SecretsError as exc:
            raise UsageError(str(exc)) from None
    secrets = secrets or Secrets()
    for dest, value in secrets.flags.items():
        if getattr(args, dest) is None:  # a flag still on the command line wins, as argparse would have it
            setattr(args, dest, value)
    return secrets.overlay(os.environ)


# How trellis serve's errors name its flags (actors.model.from_settings cites them).
FLAG_NAMES = {"provider": "--model", "base_url": "--openai-base-url", "model": "--openai-model"}


def make_model(args: argparse.Namespace, settings: Settings,
               environ: Mapping[str, str] | None = None) -> ModelProvider:
    """The primary model: :func:`actors.provider_from_settings` with the flags over the settings, or the
    scripted provider's ``--script`` or showcase demo; ``environ`` (default ``os.environ``) supplies
    ``OPENAI_*``."""
    provider = args.model or settings.model.get("provider", "scripted")
    if provider == "scripted" and args.script:
        return load_script(args.script)
    # The showcase is `trellis serve`'s default demo (the ACP agent has no --demo).
    if provider == "scripted" and getattr(args, "demo", None) == "showcase":
        from actors.model.showcase import ShowcaseModel

        return ShowcaseModel()
    flags = Overrides(provider=args.model, names=FLAG_NAMES, openai=dict(
        base_url=args.openai_base_url, model=args.openai_model, api_key=args.openai_api_key,
        context_window=args.context_window, max_tokens=args.max_tokens, connect_timeout=args.model_connect_timeout,
        read_timeout=args.model_read_timeout, request_timeout=args.model_request_timeout, max_retries=args.model_retries, text_tool_calls=args.text_tool_calls,
    ))
    return provider_from_settings(settings, environ, overrides=flags, warn=lambda line: say(line, "warning"))


@attrs.frozen
class DaemonConfig:
    """What a daemon is opened with: the settings, the primary model, where it keeps state, its default cwd."""

    settings: Settings
    model: ModelProvider
    state_dir: Path
    workspace: str | None = None

    def open(self, *, store: Any = None, recorder: Any = None) -> AbstractAsyncContextManager[Daemon]:
        """:func:`actors.open_daemon` on this configuration; ``store``: a cluster node's (default: local files);
        ``recorder``: one whose wrapped edges (the model, the tools, the hook runner) the daemon runs with."""
        edges = recorder.edges(self.settings, self.model) if recorder is not None else {"model": self.model}
        return open_daemon(self.settings, state_dir=self.state_dir, workspace=self.workspace, store=store,
                           sync_in_thread=True, **edges)


def load_daemon_config(args: argparse.Namespace, environ: Mapping[str, str] | None = None) -> DaemonConfig | None:
    """The daemon's configuration from the parsed flags and ``environ`` (default ``os.environ``).

    Errors and warnings go to stderr; ``None`` on error.
    """
    environ = os.environ if environ is None else environ
    try:
        settings = load_settings(
            settings_path(args.settings, environ), safe_mode=args.safe_mode, bare=args.bare,
            max_sessions=args.max_sessions, max_pending_prompts=args.max_pending_prompts,
            event_ring_size=args.event_ring_size, max_connections=args.max_connections, sandbox=args.sandbox,
        )
        key = settings.model.get("apiKey")
        add_secret(key if isinstance(key, str) else None)  # never in a log line (transport.logs)
        model = make_model(args, settings, environ)
    except (SettingsError, ScriptError) as exc:
        say(str(exc), "error")
        return None
    for warning in settings.warnings:
        say(warning, "warning")
    return DaemonConfig(settings, model, Path(args.state_dir or ".trellis"), args.workspace)


def settings_path(given: str | None, environ: Mapping[str, str]) -> str | None:
    """The settings file to read: ``--settings`` as given, else the per-user one
    (:func:`actors.settings_file.user_settings_path`) if it exists; without either the daemon runs on the
    defaults. A per-user file that exists but cannot be read is an error naming it, like a given one:
    silently running without settings the user wrote would be worse.
    """
    if given is not None:
        return given
    path = user_settings_path(environ)
    return path if os.path.lexists(path) else None


def configure_logging(args: argparse.Namespace, environ: Mapping[str, str]) -> None:
    """``--log-level`` and ``--log-format`` on stderr; the token and API key given are never written there."""
    configure(args.log_level, args.log_format, secrets=(
        args.token, environ.get("TRELLIS_TOKEN"), args.openai_api_key, environ.get("OPENAI_API_KEY"),
        *(p for url in (args.store, environ.get("TRELLIS_STORE"), args.events, environ.get("TRELLIS_EVENTS"))
          for p in _passwords(url))))


def _passwords(url: str | None) -> tuple[str, ...]:
    """The passwords in a URL (``scheme://user:password@host``, and ``password=`` / ``sslpassword=``
    parameters) as written and percent-decoded, as the clients use them (so no log line carries either)."""
    try:
        parts = urlsplit(url) if url else None
        written = [parts.password] if parts is not None else []
    except ValueError:  # not a URL at all: ClusterConfig refuses it, naming it
        return ()
    if parts is not None:
        written += [value for key, value in parse_qsl(parts.query, keep_blank_values=False)
                    if key.lower() in ("password", "sslpassword")]
    return tuple(dict.fromkeys(p for w in written if w for p in (w, unquote(w))))


def cluster_config(args: argparse.Namespace, environ: Mapping[str, str], token: str | None, auth: bool,
                   settings: Settings) -> Any:
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
        for password in _passwords(url):  # the flags' and environment's are redacted already (configure_logging)
            add_secret(password)
    if not store and not events:
        for flag in ("node_id", "advertise_url", "lease_seconds"):
            if getattr(args, flag) is not None:
                raise UsageError(f"--{flag.replace('_', '-')} is for cluster mode: it needs --store and --events")
        return None
    if not store or not events:
        raise UsageError("cluster mode needs both --store postgresql://… and --events redis://… "
                         "(or $TRELLIS_STORE and $TRELLIS_EVENTS)")
    if auth and not token:
        raise UsageError("cluster mode needs the token every node shares: pass --token or set $TRELLIS_TOKEN "
                         "(a minted one would differ from node to node)")
    from actors.cluster.node import ClusterConfig

    node_id = node_id or f"{socket.gethostname()}-{args.port if args.port else os.getpid()}"
    try:
        return ClusterConfig(store, events, node_id, advertise_url or "",
                             lease_seconds=lease if lease is not None else 5.0,
                             max_sessions=settings.limits.max_sessions,
                             allow_unauthenticated=settings.cluster_allow_unauthenticated)
    except ValueError as exc:
        raise UsageError(f"cluster: {exc}") from None




def recorder_for(args: argparse.Namespace, environ: Mapping[str, str]) -> Any:
    """``--record DIR``: a recorder on the daemon's edges (``actors.replay.recorder``), never writing a secret:
    what the log redacts (the token, the API key, passwords) and the environment's secret-looking values."""
    from actors.replay.recorder import Recorder

    from .logs import REDACT

    secret_names = ("KEY", "TOKEN", "SECRET", "PASSWORD", "PASSWD", "CREDENTIAL", "AUTH")
    secrets = [v for k, v in environ.items() if any(n in k.upper() for n in secret_names)]
    secrets += [getattr(args, "openai_api_key", None), getattr(args, "token", None)]
    return Recorder(args.record, record_all=not args.record_requested, secrets=secrets, live_secrets=REDACT.secrets)


def run_daemon(args: argparse.Namespace, environ: Mapping[str, str], *, token: str | None, auth: bool) -> int:
    """Serve the daemon the (checked) flags describe over HTTP until a signal stops it; the process's exit status.

    ``token`` is the one given (``--token`` or ``$TRELLIS_TOKEN``; ``None``: one is minted), ``auth`` is off
    with ``--no-auth``. A cluster configuration that cannot run is a :class:`UsageError`.
    """
    configure_logging(args, environ)
    try:
        check_bind(args.hostname, auth, token_given=bool(token))
    except InsecureBind as exc:
        say(str(exc), "error")
        return 2
    config = load_daemon_config(args, environ)
    if config is None:
        return 2
    cluster = cluster_config(args, environ, token, auth, config.settings)
    if not auth:
        say("--no-auth: authentication is off; any local user or process can drive this daemon "
            "and the commands its sessions run", "warning")

    shutdown = Shutdown(config.settings.limits.shutdown_seconds)
    held: HeldStateDir | None = None  # the state directory, once this daemon holds it

    async def serving(daemon: Daemon, node: Any, *, task_status: trio.TaskStatus[str]) -> None:
        try:
            await serve(daemon, host=args.hostname, port=args.port, token=token, auth=auth,
                        allowed_origins=tuple(args.allow_origin), allowed_hosts=tuple(args.allow_host),
                        acp_grace=args.acp_grace, cluster=node, task_status=task_status)
        finally:
            shutdown.served.set()

    async def run() -> None:
        # Opened first, so a signal during start-up waits for the daemon and then stops it in order.
        with trio.open_signal_receiver(*shutdown_signals()) as signals, shutdown.root:
            async with AsyncExitStack() as stack:
                node = None
                if cluster is not None:
                    from actors.cluster.open import open_cluster

                    node = await stack.enter_async_context(open_cluster(cluster))
                recorder = recorder_for(args, environ) if getattr(args, "record", None) else None
                daemon = await stack.enter_async_context(config.open(store=node.store if node is not None else None,
                                                                     recorder=recorder))
                if recorder is not None:
                    daemon.recorder = recorder.attach(daemon)  # type: ignore[attr-defined]  # POST /session's record
                    say(f"recording sessions to {args.record}", "info")
                shutdown.daemon = daemon
                daemon.runtime.telemetry.watch(stall_watch=watch)  # GET /metrics: trellis_event_loop_stalls_total
                if node is not None:
                    node.attach(daemon)
                    shutdown.node = node
                async with trio.open_nursery() as nursery:
                    url = await nursery.start(serving, daemon, node)
                    if node is not None:
                        await nursery.start(node.run, url)
                    if auth and token is None:  # serve's own (kept or minted); name the file, never print it
                        say(f"token: {token_path(config.state_dir)} (send it as Authorization: Bearer)")
                    assert held is not None
                    try:
                        # Where clients find it (trellis.connect), with the proof that it knows its token.
                        held.announce(url, (token or persisted_token(config.state_dir)) if auth else None)
                    except StorageError as exc:
                        say(f"{exc}: clients must be given --url", "warning")
                    print(f"listening on {url}", flush=True)
                    listened.append(url)
                    if watch is not None:
                        watch.arm()  # start-up (the app's routes compiled in one step) is not a stall
                    # What start-up made, and then what each full collection finds alive, is frozen: a
                    # full collection walks only what became old since the last (see gc_policy).
                    collector.append(FreezeSurvivors(lambda: daemon.session_count, lambda: daemon.sessions_closed))
                    collector[0].install()  # taken out once the run is over, the daemon closed
                    daemon.runtime.telemetry.watch(collector=collector[0])  # GET /metrics: trellis_gc_thaws_total
                    nursery.start_soon(shutdown.watch, signals, nursery)

    try:  # traces: only when the standard OTEL_* variables ask for them (the otel extra)
        traced = configure_from_environment(environ)
    except RuntimeError as exc:
        say(f"cannot start: {exc}", "error")
        return 2
    if traced is not None:
        say(traced)
    include_content(config.settings.telemetry_include_content)
    watch = StallWatch(args.report_loop_stalls, armed=False) if args.report_loop_stalls is not None else None
    collector: list[FreezeSurvivors] = []  # the garbage-collection policy, once the daemon listens
    listened: list[str] = []  # the URL, once serving: an OSError after that is no failure to bind
    try:
        # Held before the daemon opens (it restores sessions and clears sandbox homes there) until it is gone.
        with hold_state_dir(config.state_dir) as held:
            trio.run(run, instruments=[watch] if watch else [])
    except (StateDirInUse, StorageError) as exc:
        say(f"cannot start: {exc}", "error")
        return 2
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
        why = getattr(first, "strerror", None) or first
        if listened:  # e.g. a cluster's backend gone while the leases were released at shutdown
            say(f"stopped serving on {listened[0]}: {why}", "error")
        else:
            say(f"cannot serve on {args.hostname}:{args.port}: {why}", "error")
        return 1
    finally:
        for policy in collector:
            policy.uninstall()
        shutdown.finished()
        if watch is not None:
            say(watch.report())
    return shutdown.exit_code()


def _first_leaf(error: BaseException) -> BaseException:
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error
