"""Sessions: the session actor, its prompt FIFO, turns and tools."""
