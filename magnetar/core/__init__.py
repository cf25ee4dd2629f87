"""Tier 0: errors, names, ids, configuration and clocks shared by every layer."""
