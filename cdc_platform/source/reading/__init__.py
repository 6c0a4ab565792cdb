"""Side reads of a table over SQL: what snapshots, repairs and comparisons read beside the stream.

What it offers: :mod:`row_reader` (a table's rows in primary-key chunks, as the same JSON text
the binlog gives), the table described for it (``table_description``), how each column type is
selected and converted (``column_reads``), the rows of a SELECT read straight from the packets
(``result_rows``), row images and key text (``row_images``, ``row_keys``), how each key column
is read and bound back (``key_forms``) and which tables a destination's filters capture
(``table_listing``).

It never imports :mod:`cdc_platform.source.stream` (import-linter keeps the rooms apart).
"""
