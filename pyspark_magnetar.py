"""PySpark auto-registers a top-level ``pyspark_<name>`` module's ``DefaultSource``: with
Magnetar installed, ``spark.read.format("magnetar")`` works with no registration call."""

from magnetar.spark.source import MagnetarDataSource as DefaultSource

__all__ = ["DefaultSource"]
