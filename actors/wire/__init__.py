"""The wire form of every message and event, in one place (this package).

Everything that crosses a process boundary — REST bodies, SSE frames, ACP
``session/update`` payloads, transcript lines — is shaped here. The event data
mirror qwen-code's daemon (docs/protocol.md describes them) so its clients work unchanged.

Decoding is strict: unknown fields, wrong scalar types (no ``"7"`` for 7) and
unknown content-block types are refused with a :class:`WireError` naming the
JSON path of the first problem.

    errors.py   bounded excerpts of client input; WireError with its JSON path
    events.py   the bus Event and the builder of every event's data
    bodies.py   request bodies, content blocks and the strict converter
    jsonrpc.py  JSON-RPC 2.0 for ACP, MCP and the signal client: messages, batches, errors

Everything is imported from ``actors.wire`` itself, except JSON-RPC: it is
``actors.wire.jsonrpc``, its short names (``parse``, ``request``) kept in their
module; the modules only keep each part small.
"""

from .bodies import *  # noqa: F403
from .errors import *  # noqa: F403
from .events import *  # noqa: F403
