"""Tier 3: object stores and the offloader (closed segments → Parquet). Not built yet."""
