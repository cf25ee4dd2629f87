"""Tier 7: the PySpark data source. Not built yet."""
