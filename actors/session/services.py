"""What a session lends its tools (:class:`~.tools.ToolServices`): one object, named parts, nothing else.

Tools read these through ``context.services``: the permission decision, the
background manager, the client's files and terminal (when an editor lent
them), the approval mode, the daemon's runtime and the session's hook
configuration (for the paths a tool may touch), the session's sandbox, and
where to publish a tool call's progress.
"""

from __future__ import annotations

from typing import Any

from .authorizer import Authorizer
from .client import ClientServices
from .hook_events import SessionHooks
from .publisher import Publisher
from .tools import ToolContext


class SessionServices:
    """The :class:`~.tools.ToolServices` of one session."""

    def __init__(self, authorizer: Authorizer, background: Any, runtime: Any, hooks: SessionHooks,
                 sandbox: Any, publisher: Publisher) -> None:
        self._authorizer = authorizer
        self.background = background
        self.runtime = runtime
        self._hooks = hooks
        self.sandbox = sandbox
        self._publisher = publisher
        # What a bound editor lends the tools instead of local files and shells; None: local.
        self.client: ClientServices | None = None

    async def authorize(self, context: ToolContext, **request: Any) -> str | None:
        return await self._authorizer.authorize(context, **request)

    @property
    def approval_mode(self) -> str:
        return self._authorizer.mode

    @property
    def always_denied(self) -> frozenset[str]:
        return self._authorizer.always_denied

    def child_permissions(self, cwd: str, child_cwd: str) -> Any:
        """The rules a child session this one starts in ``child_cwd`` takes (:meth:`Authorizer.for_child`)."""
        return self._authorizer.for_child(cwd, child_cwd)

    def refused_by_rule(self, tool: str, arguments: Any, cwd: str) -> str | None:
        """Why a deny rule refuses calling ``tool`` so (for a call a tool makes on another's behalf), or None."""
        verdict = self._authorizer.verdict(tool, arguments, cwd)
        return self._authorizer.refusal(verdict) if verdict.effect == "deny" else None

    @property
    def hooks(self) -> Any:
        """The session's hook configuration (the files its hooks run are protected from writes)."""
        return self._hooks.config

    def vouch_for(self, path: str) -> None:
        self._hooks.vouch_for(path)

    @property
    def files(self) -> Any:
        """The file tools' backend: the client's, if one lent it, else ``None`` (local)."""
        return self.client.files if self.client is not None else None

    @property
    def terminal(self) -> Any:
        """The foreground shell's terminal: the client's, else ``None`` (local)."""
        return self.client.terminal if self.client is not None else None

    def publish_update(self, update: dict[str, Any], prompt_id: str | None = None) -> None:
        self._publisher.update(update, prompt_id)


__all__ = ["SessionServices"]
