"""Tier 6: admin REST API and dashboard. Not built yet."""
