"""How model-run commands become processes: the sandbox policy and environment, the spawn that keeps them tied to
the daemon, and the markers, reaper and lifeline that find every process they started again."""

from .markers import ensure_lifeline, kill_task, kill_task_now, marked_environment, run_id
from .reaper import RUN_VAR, TASK_VAR, kill_marked, marked_pids
from .sandbox import (ENV_ALLOWLIST, NO_SANDBOX, SANDBOX_SETTINGS, WITHHELD_NAMES, Sandbox, SandboxRefusal,
                      SandboxSetting, SandboxUnavailable, allowed_environment, parse_env, resolve_sandbox)
from .spawn import Child, require_executable, spawn_child

__all__ = ["ENV_ALLOWLIST", "NO_SANDBOX", "RUN_VAR", "SANDBOX_SETTINGS", "TASK_VAR", "WITHHELD_NAMES", "Child",
           "Sandbox", "SandboxRefusal", "SandboxSetting", "SandboxUnavailable", "allowed_environment",
           "ensure_lifeline", "kill_marked", "kill_task", "kill_task_now", "marked_environment", "marked_pids",
           "parse_env", "require_executable", "resolve_sandbox", "run_id", "spawn_child"]
