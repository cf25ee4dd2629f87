"""Tier 6: wire codecs (pure) and their asyncio servers."""
