"""Row images from binlog bytes to the change log's lossless JSON representation.

The source decodes the row data of a rows event itself, from the bytes and the table-map
column metadata (type, length, precision, charset, ENUM/SET values), instead of using the
values mysql-replication 1.0.17 decodes. Decoding from the bytes is what makes the
representation lossless: the library drops trailing 0x00 of BINARY(n), turns zero and partial
dates, empty SETs and all-zero UUID/INET values into None or '', gets negative TIME with a
fraction wrong, reads YEAR 0000 as 1900 and decodes TIMESTAMP in the process's local time
zone (measured). Each of those is decoded correctly here, and docs/types.md lists the
representation of every column type. It is also several times faster than the library's
row decoding (bench/source_decode.py), which keeps the source from being the bottleneck.

One module per type family: :mod:`.numbers`, :mod:`.temporal`, :mod:`.strings` (text, binary,
ENUM, SET), :mod:`.logical` (UUID, INET4, INET6), :mod:`.json_values`, :mod:`.spatial`;
:mod:`.readers` picks a column's reader, :mod:`.rows` decodes whole row images, and
:mod:`.columns` is the column model and the JSON text everything is written in. The package
knows nothing of pymysqlreplication.
"""

from cdc_platform.source.values.columns import ColumnSpec, FieldType, dumps
from cdc_platform.source.values.logical import format_inet6
from cdc_platform.source.values.readers import make_reader
from cdc_platform.source.values.rows import RowDecoder

__all__ = [
    "ColumnSpec",
    "FieldType",
    "RowDecoder",
    "dumps",
    "format_inet6",
    "make_reader",
]
