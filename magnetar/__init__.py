"""Magnetar: a Pulsar-style event streaming store and event-sourcing engine.

Importing this package is cheap: heavy optional libraries (pyspark, pyarrow, ...)
are imported lazily by the modules that need them.
"""

__version__ = "0.1.0"
