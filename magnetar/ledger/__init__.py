"""Tier 4: the managed ledger, one partition's segments across storage and tier."""
