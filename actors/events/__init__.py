"""Event bus and subscriptions."""

from .bus import DEFAULT_MAX_QUEUED, DEFAULT_RING_SIZE, EventBus, Subscription, TooManySubscribers

__all__ = ["DEFAULT_MAX_QUEUED", "DEFAULT_RING_SIZE", "EventBus", "Subscription", "TooManySubscribers"]
