"""The settings file: its form, reading it, and its JSON Schema.

The form is what ``--settings FILE`` may hold, as attrs classes checked by :mod:`actors.checked`.
:func:`load_settings` reads a file into :class:`~actors.settings.Settings`, :func:`settings_from_dict` a
parsed document. Both go through :func:`read`, which structures it into :class:`SettingsFile` (every block
at once: the ``hooks``, ``mcpServers``, ``model`` and ``sandbox`` classes are their owners'; the
``subagents`` block's are here, since its owners read the settings), and returns the ``Settings``
attributes it gives with the warnings about it. A group's keys (``limits``, ``experimental``, ...) may also
be written dotted at the top level. A settings file may carry keys we do not use (people share one file
between tools): those are warnings, never fatal.

:func:`schema` is the file's JSON Schema, generated from the same classes; ``python -m actors.settings_file``
rewrites ``actors/settings.schema.json`` with it (tests/actors/test_settings_schema.py checks that the
committed file is what it generates).
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import stat
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import attrs

from . import checked
from .checked import CheckError, PositiveInt, PositiveNumber
from .mcp_client.config import SettingsServers, ignored_members
from .permission_rules import RuleLists
from .model.openai import ModelSettings
from .process.sandbox import EnvForm, SandboxForm, SandboxMode, SandboxSetting
from .session.hooks import HooksConfig
from .settings import ApprovalMode, ClusterBackend, Limits, Settings, SettingsError

SCHEMA_PATH = Path(__file__).with_name("settings.schema.json")

# attrs metadata of SettingsFile's fields
_SETTING = "settings.attribute"  # the Settings attribute the key sets
_AS_WRITTEN = "settings.as_written"  # Settings keeps the block as written: its owner reads it (hook_config, ...)
_CONVERT = "settings.convert"  # what Settings keeps of the structured value
_GROUP = "settings.group"  # a group of keys, which may also be written dotted at the top level


def _setting(name: str, doc: str, *, as_written: bool = False, convert: Any = None) -> Any:
    """A key that sets the :class:`Settings` attribute ``name``; its default is that attribute's."""
    default = attrs.fields_dict(Settings)[name].default
    metadata = {_SETTING: name, _AS_WRITTEN: as_written, _CONVERT: convert}
    if isinstance(default, attrs.Factory):  # type: ignore[arg-type]
        return checked.field(factory=default.factory, doc=doc, metadata=metadata)  # type: ignore[union-attr]
    return checked.field(default, doc, metadata=metadata)


def _group(cls: type, setting: str | None = None) -> Any:
    """A group of keys (their settings are on its fields), or with ``setting`` an object setting of its own
    (``limits``: the members the file gives replace the base's)."""
    return checked.field(factory=cls, metadata={_GROUP: True, _SETTING: setting})


_GROUP_DOC = " A value that is not an object is refused. Unknown keys inside are ignored with a warning."


@checked.form("Experimental features." + _GROUP_DOC)
@attrs.frozen(kw_only=True)
class Experimental:
    todo_stop_guard: bool = _setting(
        "todo_stop_guard", "The Todo Stop Guard, read at start only; --safe-mode and --bare force it off, and the "
                           "plan approval mode keeps it off.")


@checked.form("Client-facing extras." + _GROUP_DOC)
@attrs.frozen(kw_only=True)
class Ui:
    enable_followup_suggestions: bool = _setting(
        "followup_suggestions", "After a completed turn, ask the model for up to three follow-up prompts "
                                "(followup_suggestion events).")


@checked.form("The journal." + _GROUP_DOC)
@attrs.frozen(kw_only=True)
class Storage:
    fsync: Literal["always", "never"] = _setting(
        "journal_fsync", "always: the journal records a 202 rests on are fsynced before it is sent; never: "
                         "written, not fsynced (a 202 survives the daemon being killed, not a power cut).")


@checked.form("Checkpoints: the files of a session's cwd at the start of each user turn, so a rewind can restore "
              "them (docs/how-to/checkpoints.md). Kept under <state-dir>/checkpoints; a daemon without a state "
              "directory keeps none." + _GROUP_DOC)
@attrs.frozen(kw_only=True)
class Checkpoints:
    enabled: bool = _setting("checkpoints_enabled", "Take a checkpoint at the start of each user turn.")
    max_file_bytes: PositiveInt = _setting(
        "checkpoint_max_file_bytes", "A file larger than this is not saved: a notice names it, and a rewind leaves "
                                     "it alone.")
    max_session_bytes: PositiveInt = _setting(
        "checkpoint_max_session_bytes", "Bytes one session's checkpoints may keep in all (file contents, manifests, "
                                        "the conversation copies a rewind keeps, their log); changed files that "
                                        "do not fit are not saved, and once a checkpoint does not fit no more are "
                                        "taken (a notice says so).")


@checked.form("Metrics and traces (docs/how-to/operations.md): GET /metrics, and OpenTelemetry spans when the "
              "standard OTEL_* variables set up an exporter." + _GROUP_DOC)
@attrs.frozen(kw_only=True)
class Telemetry:
    include_content: bool = _setting(
        "telemetry_include_content", "Let spans carry prompts, model text and tool arguments (never metrics). Off: "
                                     "a span says what happened and how long it took, never what was said.")


@checked.form("When a turn counts as a loop and ends with stop reason max_turn_requests." + _GROUP_DOC)
@attrs.frozen(kw_only=True)
class LoopProtection:
    max_tool_calls_per_turn: PositiveInt = _setting("max_tool_calls_per_turn", "Tool calls in one turn.")
    max_repeated_failures: PositiveInt = _setting(
        "max_repeated_failures", "The same failing call (name and arguments) this often in a row.")


@checked.form("The built-in file and fetch tools." + _GROUP_DOC)
@attrs.frozen(kw_only=True)
class Tools:
    enable_web_fetch: bool = _setting(
        "web_fetch", "Offer the web_fetch tool (an HTTP(S) GET that asks permission). Off: the model is not told "
                     "of it.")
    web_fetch_allow_private_addresses: bool = _setting(
        "web_fetch_private_addresses",
        "Let web_fetch connect to loopback and private addresses (127.0.0.0/8, ::1, 10/8, 172.16/12, 192.168/16, "
        "100.64/10, fc00::/7, ...): a server on this machine or the LAN. Off: a host that is or resolves only to "
        "such addresses is refused. Link-local addresses (169.254/16, fe80::/10: the cloud metadata service), "
        "fd00:ec2::254, 100.100.100.200, unspecified and multicast ones are refused either way.")
    allow_paths_outside_cwd: bool = _setting(
        "paths_outside_cwd", "Let read_file, write_file, edit, glob and grep use paths outside the session's cwd "
                             "(writes still ask permission in default mode). The state directory and the settings "
                             "file stay out of reach.")


@checked.form("Cluster mode: several daemons sharing sessions through PostgreSQL and Redis (docs/cluster.md). The "
              "flags --store, --events, --node-id, --advertise-url and --lease-seconds, then $TRELLIS_STORE and "
              "$TRELLIS_EVENTS, win over these." + _GROUP_DOC)
@attrs.frozen(kw_only=True)
class Cluster:
    store: str | None = _setting(
        "cluster_store", "The PostgreSQL database every node keeps sessions in (postgresql://…; it may hold a "
                         "password: the settings file is hidden from model-run commands).")
    events: str | None = _setting("cluster_events", "The Redis server carrying live events and wake-ups (redis://…).")
    node_id: str | None = _setting(
        "cluster_node_id", "This node's name: 1 to 64 letters, digits, '.', '_' and '-' (default: the host name "
                           "and port).")
    advertise_url: str | None = _setting(
        "cluster_advertise_url", "The http:// or https:// URL other nodes reach this one at (default: the bound "
                                 "address).")
    lease_seconds: PositiveNumber | None = _setting(
        "cluster_lease_seconds", "How long a node that stopped renewing keeps its sessions before another takes "
                                 "them over (0.5 to 300, default 5; the same on every node).")
    allow_unauthenticated: tuple[ClusterBackend, ...] = _setting(
        "cluster_allow_unauthenticated",
        "The backends this node may use although they answer a connection that gives no credentials: \"redis\", "
        "\"postgresql\" or both. Empty (the default): a node refuses to start on such a backend, since model-run "
        "commands share the host's network and would read and write every session's events and records. Only "
        "for a backend nothing a model runs can reach (docs/cluster.md); the node logs a warning naming it.")


@checked.form("The command runner: an external agent CLI per turn. Unknown members are ignored with a warning.")
@attrs.frozen(kw_only=True)
class CommandRunnerSettings:
    template: str | None = checked.field(
        None, "The external CLI run for each turn, split like a shell would (never run through one); {brief} and "
              "{config} are replaced in each word. Checked when a run starts.", nullable=True)
    env: EnvForm | None = checked.field(
        None, "What the command runner's CLI gets on top of a model-run command's environment (its API key: "
              "[\"ANTHROPIC_API_KEY\"] for Claude Code), in the form of sandbox.env.", nullable=True)


@checked.form("The session runner: a child session of this daemon. Unknown members are ignored with a warning.")
@attrs.frozen(kw_only=True)
class SessionRunnerSettings:
    model: str | None = checked.field(None, "The model name of child sessions (null: the daemon's).", nullable=True)
    approval_mode: ApprovalMode | None = checked.field(
        None, "The approval mode of child sessions (null: the daemon's approvalMode).", nullable=True)


@checked.form("The runners' own settings. Unknown members are ignored with a warning.")
@attrs.frozen(kw_only=True)
class RunnersSettings:
    command: CommandRunnerSettings = checked.field(factory=CommandRunnerSettings, doc="The command runner.")
    session: SessionRunnerSettings = checked.field(factory=SessionRunnerSettings, doc="The session runner.")


Runner = Literal["session", "command"]


@checked.form("Subagent runs started over MCP or by a session's agent tool. Other members are ignored with a "
              "warning (a misspelt runner setting would otherwise silently keep the default).")
@attrs.frozen(kw_only=True)
class SubagentsSettings:
    """The ``subagents`` settings, as written (:class:`actors.subagents.registry.SubagentConfig` is what the
    registry uses)."""

    runners: RunnersSettings = checked.field(factory=RunnersSettings, doc="The runners' own settings.")
    default_runner: Runner = checked.field("session", "The runner of a start that names none.")
    signal_grace_seconds: PositiveNumber = checked.field(
        60.0, "After a subagent's first signal, how long the turn it arrived in may go on before it is cut short.")


def subagents_settings(subagents: Any) -> SubagentsSettings:
    """The ``subagents`` settings (a dict as written; ``None``: none); a ``ValueError``
    (:class:`actors.checked.CheckError`) naming the JSON path of a bad value."""
    return checked.structure({} if subagents is None else subagents, SubagentsSettings, "subagents")


def _sandbox_setting(value: str | SandboxForm) -> str | SandboxSetting:
    return value.setting() if isinstance(value, SandboxForm) else value


@checked.form(
    "The JSON settings file of the Trellis daemon (--settings FILE). Unknown keys are reported as warnings at "
    "start and ignored (a file may be shared with other tools), so they are allowed here; a known key with a wrong "
    "value is an error naming its JSON path. The keys of a group may also be written dotted at the top level "
    "({\"limits.maxSessions\": 8} is {\"limits\": {\"maxSessions\": 8}}). Integers must be written without a "
    "fraction: the daemon refuses 8.0, which JSON Schema cannot tell from 8. Generated from actors/settings_file.py "
    "(python -m actors.settings_file); see docs/settings.md.")
@attrs.frozen(kw_only=True)
class SettingsFile:
    """A settings file, as written."""

    experimental: Experimental = _group(Experimental)
    ui: Ui = _group(Ui)
    disable_all_hooks: bool = _setting(
        "disable_all_hooks", "Run no command hook (the hooks block is still validated). Never turns the Todo Stop "
                             "Guard off.")
    approval_mode: ApprovalMode = _setting(
        "approval_mode", "A new session's approval mode: default asks the client before running a command, "
                         "auto-edit runs file edits and web fetches unasked and asks for the rest, yolo runs tools "
                         "without asking, plan refuses execution.")
    permissions: RuleLists = _setting(
        "permissions", "Permission rules in Claude Code's form: {\"allow\": [...], \"ask\": [...], \"deny\": [...]}. "
                       "Deny wins over ask, ask over allow, any rule over the approval mode; plan mode still refuses "
                       "execution. A rule that cannot be read is refused at start, naming it.")
    sandbox: SandboxMode | SandboxForm = _setting(
        "sandbox", "Where model-run commands run: auto uses bubblewrap when it works here, bwrap refuses to start "
                   "without it, off runs them with the daemon's rights. --sandbox overrides the mode. The object form "
                   "{\"mode\": ..., \"env\": ..., \"writable\": ..., \"network\": ..., \"maxProcesses\": ...} also "
                   "names what those commands get on top of the allowlisted environment (sandbox or not), what they "
                   "may write, whether they have a network and how many processes they may have.",
        convert=_sandbox_setting)
    storage: Storage = _group(Storage)
    checkpoints: Checkpoints = _group(Checkpoints)
    telemetry: Telemetry = _group(Telemetry)
    hooks: HooksConfig = _setting("hooks", "Command hooks by event, in Claude Code's hooks form.", as_written=True)
    stop_hook_blocking_cap: PositiveInt = _setting(
        "stop_hook_block_cap", "Consecutive Stop-hook blocks in one turn before the hook is overridden and the turn "
                               "ends.")
    loop_protection: LoopProtection = _group(LoopProtection)
    model: ModelSettings = _setting("model", "The primary model.", as_written=True)
    subagents: SubagentsSettings = _setting("subagents", "Subagent runs.", as_written=True)
    system_prompt: str | None = _setting(
        "system_prompt", "Replaces the base of every session's system prompt (\"\" sends none); unset: the built-in "
                         "prompt.")
    append_system_prompt: str | None = _setting(
        "append_system_prompt", "Added after the system prompt of every session.")
    tools: Tools = _group(Tools)
    mcp_servers: SettingsServers = _setting(
        "mcp_servers", "MCP servers every session starts, by name (Claude Code's, qwen-code's and gemini-cli's "
                       "format): a stdio server gives command, a Streamable HTTP one httpUrl (or url with type "
                       "\"http\"), an SSE one url with type \"sse\"; a bare url is tried as Streamable HTTP, then as "
                       "SSE. Their tools are offered as mcp__<server>__<tool>. Unknown members of a server are "
                       "ignored with a warning. See docs/settings.md.", as_written=True)
    limits: Limits = _group(Limits, setting="limits")
    cluster: Cluster = _group(Cluster)


def _groups() -> dict[str, attrs.Attribute]:  # type: ignore[type-arg]
    return {key: f for key, f in checked.json_fields(SettingsFile).items() if f.metadata.get(_GROUP)}


def _undotted(data: dict[str, Any]) -> dict[str, Any]:
    """``{"limits.maxSessions": 8}`` as ``{"limits": {"maxSessions": 8}}``; of two spellings of a key, the later
    one in the file wins."""
    groups = _groups()
    out: dict[str, Any] = {}
    for key, value in data.items():
        head, dot, leaf = key.partition(".")
        if dot and head in groups:
            if isinstance(out.setdefault(head, {}), dict):  # else the group is refused for not being an object
                out[head] = {**out[head], leaf: value}
        elif key in groups and isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = {**out[key], **value}
        else:
            out[key] = value
    return out


def read(data: Any) -> tuple[dict[str, Any], list[str]]:
    """The :class:`Settings` attributes a parsed settings file gives (``limits``: the limits it gives, by name),
    and the warnings about it (unknown keys, members a server has no use for). Raises
    :class:`actors.checked.CheckError` naming the JSON path of the first bad value."""
    if isinstance(data, dict):
        data = _undotted(data)
    form: SettingsFile = checked.structure(data, SettingsFile)
    warnings = [f"unknown key {path!r} ignored" for path in checked.unknown_keys(data, SettingsFile)]
    warnings += ignored_members(form.mcp_servers, data.get("mcpServers", {}))
    return _given(form, data), warnings


def _given(form: Any, written: dict[str, Any]) -> dict[str, Any]:
    """The settings of the keys ``written`` gives (a group's by its members)."""
    out: dict[str, Any] = {}
    for key, f in checked.json_fields(type(form)).items():
        if key not in written:
            continue
        value, name = getattr(form, f.name), f.metadata.get(_SETTING)
        if name is None:
            out.update(_given(value, written[key]))
        elif f.metadata.get(_GROUP):
            out[name] = {g.name: getattr(value, g.name) for k, g in checked.json_fields(type(value)).items()
                         if k in written[key]}
        elif f.metadata.get(_AS_WRITTEN):
            out[name] = written[key]
        else:
            out[name] = f.metadata[_CONVERT](value) if f.metadata.get(_CONVERT) else value
    return out


def settings_from_dict(data: Any, *, source: str = "settings", base: Settings | None = None) -> Settings:
    """Apply a parsed settings document on top of ``base`` (defaults when omitted): the keys it gives
    replace the base's, a limit at a time. A bad value anywhere is a :class:`SettingsError` and changes
    nothing; unknown keys are warnings."""
    try:
        given, warnings = read(data)
    except CheckError as exc:
        raise SettingsError(exc.detail, path=exc.path, source=source) from None
    base = base or Settings()
    if "limits" in given:  # the limits the file gives, on top of the base's
        given["limits"] = attrs.evolve(base.limits, **given["limits"])
    return attrs.evolve(base, **given, warnings=base.warnings + tuple(f"{source}: {w}" for w in warnings))


def _refuse_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def load_settings(path: str | Path | None, **overrides: Any) -> Settings:
    """Read a settings file (if any), then apply keyword overrides (command-line flags)."""
    settings = Settings()
    if path is not None:
        source = str(path)
        try:
            data = json.loads(Path(path).read_text(), parse_constant=_refuse_constant)  # no NaN, Infinity
        except OSError as exc:
            raise SettingsError(f"cannot read: {exc.strerror}", source=source) from None
        except UnicodeDecodeError as exc:
            raise SettingsError(f"not UTF-8 text: {exc.reason} at byte {exc.start}", source=source) from None
        except ValueError as exc:  # not JSON; NaN, Infinity
            raise SettingsError(f"invalid JSON: {exc}", source=source) from None
        settings = attrs.evolve(settings_from_dict(data, source=source), path=os.path.abspath(path))
    limit_overrides = {k: v for k, v in overrides.items() if k in attrs.fields_dict(Limits) and v is not None}
    plain = {k: v for k, v in overrides.items() if k not in limit_overrides and v is not None}
    if limit_overrides:
        plain["limits"] = attrs.evolve(settings.limits, **limit_overrides)
    if isinstance(plain.get("sandbox"), str) and isinstance(settings.sandbox, SandboxSetting):
        plain["sandbox"] = attrs.evolve(settings.sandbox, mode=plain["sandbox"])  # --sandbox: the mode, not env
    return attrs.evolve(settings, **plain)


def user_settings_path(environ: Mapping[str, str]) -> str:
    """The per-user settings file: ``$XDG_CONFIG_HOME/trellis/settings.json``, or
    ``~/.config/trellis/settings.json`` when the variable is unset or not absolute (the XDG base directory
    rules). The daemon reads it when no ``--settings`` is given, and writes a rule a client asks to keep
    there when it read no other file."""
    base = environ.get("XDG_CONFIG_HOME") or ""
    if not os.path.isabs(base):
        base = os.path.join(os.path.expanduser("~"), ".config")
    return os.path.join(base, "trellis", "settings.json")


RULE_LOCK_WAIT = 10.0  # seconds a rule's write waits for another writer of the same directory


@contextmanager
def _directory_locked(directory: Path, source: str) -> Iterator[None]:
    """An exclusive ``flock`` on ``directory`` while the block runs: the writers of a rule into a settings file
    there take turns, threads of this daemon (each lock is on its own open directory) and other daemons alike.
    Waited for at most :data:`RULE_LOCK_WAIT` seconds: a process holding it without end (a model's command,
    ``flock DIR sleep``) makes the write fail, not hang."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise SettingsError(f"cannot add a rule to it: cannot open its directory: {exc.strerror or exc}",
                            source=source) from None
    try:
        deadline = time.monotonic() + RULE_LOCK_WAIT
        pause = 0.001
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise SettingsError(f"cannot add a rule to it: its directory stayed locked by another writer "
                                        f"for {RULE_LOCK_WAIT:g} s", source=source) from None
                time.sleep(pause)
                pause = min(2 * pause, 0.05)
            except OSError as exc:
                raise SettingsError(f"cannot add a rule to it: cannot lock its directory: {exc.strerror or exc}",
                                    source=source) from None
        yield
    finally:
        os.close(fd)  # and the lock with it


def _read_to_edit(path: Path, source: str) -> tuple[bytes | None, int | None]:
    """The settings file's bytes and permission bits, never through a symlink (``None, None``: no file)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return None, None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise SettingsError("cannot add a rule to it: it is a symbolic link, and the daemon writes a rule into "
                                "no file through one (nothing was changed); add the rule to the file it points to "
                                "by hand", source=source) from None
        raise SettingsError(f"cannot add a rule to it: {exc.strerror or exc}", source=source) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise SettingsError("cannot add a rule to it: it is not a regular file (nothing was changed)",
                                source=source)
        parts = []
        while chunk := os.read(fd, 1 << 20):
            parts.append(chunk)
    except OSError as exc:
        raise SettingsError(f"cannot add a rule to it: {exc.strerror or exc}", source=source) from None
    finally:
        os.close(fd)
    return b"".join(parts), stat.S_IMODE(st.st_mode)


def add_permission_rule(path: str | Path, effect: str, rule: str) -> bool:
    """Write ``rule`` into ``permissions.<effect>`` of the settings file at ``path`` (made, mode 0600, if it
    does not exist), everything else in it kept; ``False`` when the rule is there already. The file is
    replaced atomically, and only when the result still reads as settings: a :class:`SettingsError` naming
    the file (not JSON, not an object, a ``permissions`` that is not one) leaves it untouched.

    Never through a symlink: one at ``path`` (a model that can write where the file lives could plant one, to
    have another file read and its content written out) is refused with a :class:`SettingsError` naming it,
    nothing read or changed; so is anything but a regular file. Writers take turns (a lock on the file's
    directory, :func:`_directory_locked`), so two rules kept at once both land: each reads what the other
    wrote. The file keeps its permission bits, set before the rename."""
    from .storage import StorageError, replace_private  # the storage package imports the settings

    path = Path(path)
    source = str(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SettingsError(f"cannot add a rule to it: {exc.strerror or exc}", source=source) from None
    with _directory_locked(path.parent, source):
        raw, mode = _read_to_edit(path, source)
        try:
            data = json.loads(raw, parse_constant=_refuse_constant) if raw is not None else {}
        except (UnicodeDecodeError, ValueError) as exc:
            raise SettingsError(f"cannot add a rule to it: {exc}", source=source) from None
        if not isinstance(data, dict):
            raise SettingsError("cannot add a rule to it: it is not a JSON object", source=source)
        holder = data.setdefault("permissions", {})
        if not isinstance(holder, dict):
            raise SettingsError("must be an object", path="permissions", source=source)
        listed = holder.setdefault(effect, [])
        if not isinstance(listed, list):
            raise SettingsError("must be an array", path=f"permissions.{effect}", source=source)
        if rule in listed:
            return False
        listed.append(rule)
        settings_from_dict(data, source=source)  # a SettingsError names what would not read
        try:
            # The user's own file keeps the mode the user gave it.
            replace_private(path, (json.dumps(data, indent=2, ensure_ascii=False) + "\n").encode(),
                            mode=0o600 if mode is None else mode)
        except (StorageError, OSError) as exc:
            raise SettingsError(str(exc), source=source) from None
    return True


def schema() -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) of a settings file: :class:`SettingsFile`'s, with the dotted spellings."""
    out = checked.json_schema(SettingsFile, title="Trellis daemon settings")
    for key, f in _groups().items():
        for leaf in checked.json_fields(f.type):
            out["properties"][f"{key}.{leaf}"] = {"$ref": f"#/$defs/{f.type.__name__}/properties/{leaf}"}
    return out


def schema_text() -> str:
    """What ``actors/settings.schema.json`` holds."""
    return json.dumps(schema(), indent=2, ensure_ascii=False) + "\n"


def main() -> None:
    SCHEMA_PATH.write_text(schema_text())
    print(f"wrote {SCHEMA_PATH}")


if __name__ == "__main__":
    main()
