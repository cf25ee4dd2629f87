"""State stores: where a view's state is served from (SQLite, PostgreSQL, Redis)."""

from magnetar.views.stores.base import StateStore, dataset_name
from magnetar.views.stores.factory import open_state_store

__all__ = ["StateStore", "dataset_name", "open_state_store"]
