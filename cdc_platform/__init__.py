"""cdc-platform engine: MySQL/MariaDB binlog -> ring buffer -> Delta Lake change log.

Importable without Dagster; `dagster_defs` is the thin Dagster face over it.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
