"""What survives the daemon: the journal, transcripts and session records behind one interface."""

from .base import SessionStore, StorageError, TranscriptLog
from .journal import DAEMON_RESTARTED, NODE_LOST, NODE_LOST_MESSAGE, RESTARTED_MESSAGE, Replayed, replay
from .local import FSYNC_POLICIES, LocalStore, replace_private

__all__ = ["DAEMON_RESTARTED", "FSYNC_POLICIES", "NODE_LOST", "NODE_LOST_MESSAGE", "RESTARTED_MESSAGE", "LocalStore", "Replayed", "SessionStore",
           "StorageError", "TranscriptLog", "replace_private", "replay"]
