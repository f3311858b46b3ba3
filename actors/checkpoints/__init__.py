"""Checkpoints: the files of a session's cwd at the start of each user turn, to rewind them with the conversation.

    manifest.py  pure: manifests, their differences, a restore's plan, what changed outside the session
    store.py     blocking I/O: the content-addressed objects, the walk, restoring, diffs
    keeper.py    the Trio shell one session holds (worker threads, one operation at a time)

See docs/how-to/checkpoints.md.
"""

from .keeper import CheckpointRefused, Checkpoints, ConversationPort
from .manifest import LEAVES_FILES_ALONE, Entry, Manifest, Plan, changed_outside, changes, plan_restore
from .store import Store

__all__ = ["LEAVES_FILES_ALONE", "CheckpointRefused", "Checkpoints", "ConversationPort", "Entry", "Manifest", "Plan", "Store",
           "changed_outside", "changes", "plan_restore"]
