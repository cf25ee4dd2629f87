"""Topics as Iceberg tables: the catalog, the table rows, the commits of offloaded segments."""

from magnetar.tier.iceberg.columns import ValueSchema, table_schema, to_table_rows
from magnetar.tier.iceberg.tables import CATALOG_KINDS, IcebergTables, SegmentFiles, identifier

__all__ = [
    "CATALOG_KINDS",
    "IcebergTables",
    "SegmentFiles",
    "ValueSchema",
    "identifier",
    "table_schema",
    "to_table_rows",
]
