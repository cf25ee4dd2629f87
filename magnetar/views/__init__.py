"""Tier 8: event-sourced materialized views. Not built yet."""
