"""How model-run commands become processes: the sandbox policy and the spawn that keeps them tied to the daemon."""

from .sandbox import NO_SANDBOX, SANDBOX_SETTINGS, Sandbox, SandboxRefusal, SandboxUnavailable, resolve_sandbox
from .spawn import Child, require_executable, spawn_child

__all__ = ["NO_SANDBOX", "SANDBOX_SETTINGS", "Child", "Sandbox", "SandboxRefusal", "SandboxUnavailable",
           "require_executable", "resolve_sandbox", "spawn_child"]
