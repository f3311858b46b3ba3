"""``python -m transport``: run the daemon."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from functools import partial
from pathlib import Path

import trio

from actors import ScriptError, Settings, SettingsError, load_script, load_settings, open_daemon
from actors.model import ModelProvider, ScriptedModel

from .server import InsecureBind, check_bind, serve

DEFAULT_PORT = 4170


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m transport",
        description="Trellis daemon: LLM agent sessions over REST + SSE (qwen serve compatible) and ACP at /acp. "
                    "`python -m transport acp [flags]` runs the ACP agent on stdio instead.",
    )
    net = p.add_argument_group("network")
    net.add_argument("--hostname", default="127.0.0.1", help="address to bind (default 127.0.0.1, loopback)")
    net.add_argument("--port", type=int, default=DEFAULT_PORT,
                     help=f"port to bind (default {DEFAULT_PORT}; 0 picks a free port and prints it)")
    net.add_argument("--token", default=None,
                     help="bearer token clients must send (default: $TRELLIS_TOKEN); required off loopback")
    net.add_argument("--require-auth", action="store_true", help="require the token on loopback too")
    net.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                     help="browser origin allowed besides loopback ones (repeatable)")
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
    limits = p.add_argument_group("limits")
    limits.add_argument("--max-sessions", type=int, default=None, help="sessions per daemon (default 256)")
    limits.add_argument("--max-pending-prompts", type=int, default=None,
                        help="queued + running prompts per session (default 32)")
    limits.add_argument("--event-ring-size", type=int, default=None, help="events kept per session (default 8000)")
    modes = p.add_argument_group("modes")
    modes.add_argument("--safe-mode", action="store_true", default=None, help="safe mode (forces the Todo Stop Guard off)")
    modes.add_argument("--bare", action="store_true", default=None, help="bare mode (forces the Todo Stop Guard off)")
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                   help="log verbosity on stderr (default warning)")
    return p


def _positive(parser: argparse.ArgumentParser, name: str, value: int | None) -> None:
    if value is not None and value < 1:
        parser.error(f"{name} must be a positive integer")


def make_model(args: argparse.Namespace, settings: Settings) -> ModelProvider:
    provider = args.model or settings.model.get("provider", "scripted")
    if provider == "openai":
        from actors.model.openai import OpenAIConfig, OpenAIModel

        try:
            config = OpenAIConfig.from_sources(
                os.environ, settings.model, base_url=args.openai_base_url, model=args.openai_model,
                api_key=args.openai_api_key, context_window=args.context_window, max_tokens=args.max_tokens,
                connect_timeout=args.model_connect_timeout, read_timeout=args.model_read_timeout,
                max_retries=args.model_retries,
            )
        except ValueError as exc:
            raise SettingsError(f"{args.settings or 'settings'}: {exc}") from None
        return OpenAIModel(config)
    if provider != "scripted":
        raise SettingsError(f"{args.settings or 'settings'}: model.provider must be 'scripted' or 'openai'")
    if args.script:
        return load_script(args.script)
    return ScriptedModel()


def load_daemon_config(args: argparse.Namespace) -> tuple[Settings, ModelProvider] | None:
    """Settings and model from the parsed flags; errors and warnings go to stderr (``None`` on error)."""
    try:
        settings = load_settings(
            args.settings, safe_mode=args.safe_mode, bare=args.bare, max_sessions=args.max_sessions,
            max_pending_prompts=args.max_pending_prompts, event_ring_size=args.event_ring_size,
        )
        model = make_model(args, settings)
    except (SettingsError, ScriptError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    for warning in settings.warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return settings, model


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["acp"]:
        from .acp import run_stdio  # `python -m transport acp`: the ACP agent on stdio, for editors

        return run_stdio(argv[1:])
    parser = build_parser()
    args = parser.parse_args(argv)
    for name in ("max_sessions", "max_pending_prompts", "event_ring_size", "context_window", "max_tokens"):
        _positive(parser, "--" + name.replace("_", "-"), getattr(args, name))
    if not 0 <= args.port <= 65535:
        parser.error("--port must be from 0 to 65535")
    if args.acp_grace <= 0:
        parser.error("--acp-grace must be a positive number of seconds")
    logging.basicConfig(level=args.log_level.upper(), format="%(levelname)s %(name)s: %(message)s")
    loaded = load_daemon_config(args)
    if loaded is None:
        return 2
    settings, model = loaded
    token = args.token or os.environ.get("TRELLIS_TOKEN") or None
    try:
        check_bind(args.hostname, token, args.require_auth)
    except InsecureBind as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    state_dir = Path(args.state_dir or ".trellis")

    async def run() -> None:
        async with open_daemon(settings, model=model, state_dir=state_dir, workspace=args.workspace) as daemon:
            async with trio.open_nursery() as nursery:
                url = await nursery.start(partial(
                    serve, daemon, host=args.hostname, port=args.port, token=token,
                    require_auth=args.require_auth, allowed_origins=tuple(args.allow_origin),
                    acp_grace=args.acp_grace,
                ))
                print(f"listening on {url}", flush=True)

    try:
        trio.run(run)
    except KeyboardInterrupt:
        return 0
    except BaseExceptionGroup as group:
        bind_errors, rest = group.split(OSError)
        if bind_errors is None or rest is not None:
            raise
        first = bind_errors.exceptions[0]
        while isinstance(first, BaseExceptionGroup):
            first = first.exceptions[0]
        print(f"error: cannot serve on {args.hostname}:{args.port}: {getattr(first, 'strerror', None) or first}",
              file=sys.stderr)
        return 1
    return 0
