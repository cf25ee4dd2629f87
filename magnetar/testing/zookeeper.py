"""A real ZooKeeper for tests: see :mod:`magnetar.cluster.zookeeper_server`."""

from magnetar.cluster.zookeeper_server import ZooKeeperProcess, zookeeper_jar

__all__ = ["ZooKeeperProcess", "zookeeper_jar"]
