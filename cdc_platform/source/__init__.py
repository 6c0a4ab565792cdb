"""The binlog source: MySQL/MariaDB row changes, DDL and commits as ChangeEvents."""

from cdc_platform.source.binlog import BinlogSource
from cdc_platform.source.binlog_server import SourceInfo
from cdc_platform.source.filters import TableFilter

__all__ = ["BinlogSource", "SourceInfo", "TableFilter"]
