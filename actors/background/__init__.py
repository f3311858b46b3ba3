"""Background work as actors: shells, monitors, wakeups, cron jobs and the automatic queue."""
