"""Fixtures of the security tests."""

from __future__ import annotations

# Imported before any test module imports kafka-python: wire.py silences the deprecation
# warning kafka-python's schema loading raises on Python 3.11 (warnings are errors here).
from magnetar.protocols.kafka import wire  # noqa: F401
