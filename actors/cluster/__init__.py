"""Cluster mode: several daemons sharing sessions through PostgreSQL (the record) and Redis (live events).

See ``docs/cluster.md``. Nothing here is imported by a single daemon.
"""
