"""Tier 5: topics, producers, subscriptions, dispatchers, cursors, schemas."""
