"""``python -m transport``: the command line; :mod:`.bootstrap` runs the daemon it describes."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Mapping

from .bootstrap import UsageError, recover_secrets, run_daemon
from .hosts import parse_authority
from .process_image import Secrets

DEFAULT_PORT = 4170


def build_parser(*, stdio: bool = False) -> argparse.ArgumentParser:
    """The daemon's flags; ``stdio``: the ACP agent's (``trellis acp``), which listens on nothing, so the
    flags of the HTTP listener are accepted (an editor's configuration may share them) but not shown."""
    p = argparse.ArgumentParser(
        prog="trellis acp" if stdio else "python -m transport",
        description="Trellis as an ACP agent on stdin/stdout (newline-delimited JSON-RPC), for editors." if stdio
        else "Trellis daemon: LLM agent sessions over REST + SSE (qwen serve compatible), ACP at /acp and MCP "
             "at /mcp. `trellis acp` runs the ACP agent on stdio instead.",
        # No abbreviations: transport.process_image must recognise every spelling of --token and
        # --openai-api-key to keep their values out of /proc/<pid>/cmdline.
        allow_abbrev=False,
    )

    def listener(text: str) -> str:
        return argparse.SUPPRESS if stdio else text

    net = p.add_argument_group("network")
    net.add_argument("--hostname", default="127.0.0.1",
                     help=listener("address to bind (default 127.0.0.1, loopback)"))
    net.add_argument("--port", type=int, default=DEFAULT_PORT,
                     help=listener(f"port to bind (default {DEFAULT_PORT}; 0 picks a free port and prints it)"))
    net.add_argument("--token", default=None,
                     help=listener("bearer token clients must send (default: $TRELLIS_TOKEN, else a fresh one "
                                   "minted at each start into STATE_DIR/token, mode 0600)"))
    net.add_argument("--no-auth", action="store_true",
                     help=listener("serve without any token (loopback binds only; any local process can then "
                                   "drive the daemon)"))
    net.add_argument("--allow-origin", action="append", default=[], metavar="ORIGIN",
                     help=listener("browser origin allowed besides the daemon's own http://HOST:PORT "
                                   "(repeatable)"))
    net.add_argument("--allow-host", action="append", default=[], metavar="HOST[:PORT]",
                     help=listener("Host header accepted besides the bound address and localhost with the bound "
                                   "port (repeatable; no PORT means the bound port); other Hosts get 421"))
    net.add_argument("--acp-grace", type=float, default=10.0, metavar="SECONDS",
                     help=listener("how long a dropped /acp session stream keeps its prompt and permissions "
                                   "(default 10)"))
    state = p.add_argument_group("state")
    state.add_argument("--workspace", default=None, help="default working directory of new sessions (default: cwd)")
    state.add_argument("--settings", default=None, metavar="FILE",
                       help="JSON settings file (default: $XDG_CONFIG_HOME/trellis/settings.json, i.e. "
                            "~/.config/trellis/settings.json, when it exists)")
    state.add_argument("--state-dir", default=None, metavar="DIR",
                       help="where transcripts are kept (default: ./.trellis)")
    state.add_argument("--record", default=None, metavar="DIR",
                       help="record every new session (or those POST /session asks with record: true, with "
                            "--record-requested) to DIR, for trellis replay --recording FILE "
                            "(docs/how-to/record-and-replay.md)")
    state.add_argument("--record-requested", action="store_true",
                       help="with --record: record only the sessions created with record: true")
    model = p.add_argument_group("model")
    model.add_argument("--model", choices=["scripted", "openai"], default=None,
                       help="primary model provider (default: settings model.provider, else scripted, "
                            "the embedded demo model)")
    model.add_argument("--script", default=None, metavar="FILE", help="script for the scripted model (JSON)")
    model.add_argument("--demo", choices=["todos", "showcase"], default=None,
                       help="what the scripted model plays without a script: 'todos' (plans three todos and "
                            "completes them; the default of trellis acp and python -m transport) or 'showcase' "
                            "(a permission request, a background task, a slow markdown answer and todos; the "
                            "default of trellis serve)")
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
    model.add_argument("--model-request-timeout", type=float, default=None, metavar="SECONDS",
                       help="longest one model call may take in all, retries and the stream included (default 600)")
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
                         help=listener("the URL other nodes reach this one at (default: the bound "
                                       "http://HOST:PORT)"))
    cluster.add_argument("--lease-seconds", type=float, default=None, metavar="SECONDS",
                         help="how long a silent node keeps its sessions before another takes them (default 5)")
    limits = p.add_argument_group("limits")
    limits.add_argument("--max-sessions", type=int, default=None, help="sessions per daemon (default 256)")
    limits.add_argument("--max-pending-prompts", type=int, default=None,
                        help="queued + running prompts per session (default 32)")
    limits.add_argument("--event-ring-size", type=int, default=None, help="events kept per session (default 8000)")
    limits.add_argument("--max-connections", type=int, default=None,
                        help=listener("open HTTP connections, idle keep-alive ones included; more are answered "
                                      "503 too_many_connections (default: settings limits.maxConnections, else "
                                      "256)"))
    modes = p.add_argument_group("modes")
    modes.add_argument("--safe-mode", action="store_true", default=None, help="safe mode (forces the Todo Stop Guard off)")
    modes.add_argument("--bare", action="store_true", default=None, help="bare mode (forces the Todo Stop Guard off)")
    modes.add_argument("--sandbox", choices=["auto", "bwrap", "off"], default=None,
                       help="where model-run commands run (default: settings sandbox, else auto = bubblewrap when "
                            "it works here; bwrap = refuse to start without it; off = with your rights)")
    p.add_argument("--report-loop-stalls", type=float, default=None, metavar="MS",
                   help=listener("time every event-loop task step once listening: warn of each that held the loop "
                                 "over MS milliseconds (wall time less run-queue delay) and report the longest at "
                                 "exit (off by default)"))
    p.add_argument("--log-level", default="warning", choices=["debug", "info", "warning", "error"],
                   help="log verbosity on stderr (default warning; info adds a line per request and per turn)")
    p.add_argument("--log-format", default="text", choices=["text", "json"],
                   help="log lines on stderr as text (default) or one JSON object per line")
    # Internal: the pipe through which a re-executed daemon takes back its token and API key
    # (transport.process_image); never typed by hand.
    p.add_argument("--secrets-fd", type=int, default=None, metavar="FD", help=argparse.SUPPRESS)
    return p


def _positive(parser: argparse.ArgumentParser, name: str, value: int | None) -> None:
    if value is not None and value < 1:
        parser.error(f"{name} must be a positive integer")


def check_arguments(parser: argparse.ArgumentParser, args: argparse.Namespace, environ: Mapping[str, str]) -> None:
    """Refuse (``parser.error``, exit 2) values and combinations of flags no daemon could start with."""
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
    if args.record_requested and args.record is None:
        parser.error("--record-requested goes with --record DIR")
    if args.no_auth and given_token(args, environ):
        parser.error("--no-auth turns authentication off, yet a token is given (--token or $TRELLIS_TOKEN): "
                     "drop one of them")
    if args.report_loop_stalls is not None and args.report_loop_stalls < 0:
        parser.error("--report-loop-stalls must be a non-negative number of milliseconds")


def given_token(args: argparse.Namespace, environ: Mapping[str, str]) -> str | None:
    """The token clients must send, if one is given: ``--token``, else ``$TRELLIS_TOKEN``."""
    return args.token or environ.get("TRELLIS_TOKEN") or None


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
    try:
        environ = recover_secrets(args, secrets)
        check_arguments(parser, args, environ)
        return run_daemon(args, environ, token=given_token(args, environ), auth=not args.no_auth)
    except UsageError as exc:
        parser.error(str(exc))
