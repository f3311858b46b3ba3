"""The daemon's built-in file, search and fetch tools.

=================  =========  ===========================  ===================================
tool               ACP kind   asks permission              module
=================  =========  ===========================  ===================================
``read_file``      read       never                        :mod:`.read`
``write_file``     edit       yes (Plan mode refuses)      :mod:`.write`
``edit``           edit       yes (Plan mode refuses)      :mod:`.write`
``glob``           search     never                        :mod:`.search`
``grep``           search     never                        :mod:`.search`
``web_fetch``      fetch      yes (Plan mode asks too)     :mod:`.fetch` (only when enabled)
=================  =========  ===========================  ===================================

Paths and what is refused: :mod:`.paths`; the tree walk and ``.gitignore``:
:mod:`.walk`; the file backend (local now, an ACP client's later):
:mod:`.access`; bounds and diff content: :mod:`.common`.
"""

from __future__ import annotations

from typing import Any

from .fetch import WebFetchTool
from .read import ReadFileTool
from .search import GlobTool, GrepTool
from .write import EditTool, WriteFileTool

FILE_TOOLS = (ReadFileTool, WriteFileTool, EditTool, GlobTool, GrepTool)


def builtin_tools(settings: Any = None) -> list[Any]:
    """The file and search tools, and ``web_fetch`` when ``settings`` enable it (off without settings)."""
    tools: list[Any] = [tool() for tool in FILE_TOOLS]
    if settings is not None and settings.web_fetch:
        tools.append(WebFetchTool())
    return tools


__all__ = ["FILE_TOOLS", "EditTool", "GlobTool", "GrepTool", "ReadFileTool", "WebFetchTool", "WriteFileTool",
           "builtin_tools"]
