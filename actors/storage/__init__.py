"""What survives the daemon: the journal, transcripts and session records behind one interface."""

from .base import ManySessionReads, SessionStore, StorageError, TranscriptLog, journals_of, records_of
from .journal import DAEMON_RESTARTED, NODE_LOST, NODE_LOST_MESSAGE, RESTARTED_MESSAGE, Replayed, replay
from .local import FSYNC_POLICIES, LocalStore, replace_private

__all__ = ["DAEMON_RESTARTED", "FSYNC_POLICIES", "NODE_LOST", "NODE_LOST_MESSAGE", "RESTARTED_MESSAGE", "LocalStore",
           "ManySessionReads", "Replayed", "SessionStore", "StorageError", "TranscriptLog", "journals_of", "records_of",
           "replace_private", "replay"]
