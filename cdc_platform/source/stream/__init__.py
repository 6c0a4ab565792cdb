"""The binlog stream: the dump connection's events assembled into transactions of ChangeEvents.

What it offers: :class:`binlog.BinlogSource` (the stream a destination's run reads), where a
destination without a checkpoint starts (``start_position``), and beneath them the pieces of the
hot path: table maps, the lean rows framing, the decode pool and its worker processes, the
transaction assembler with its refusals, XA transactions held between PREPARE and COMMIT (and
found again after a switched primary), and what DDL does to the rows (``ddl_effects``) or may
have done to a column's type since an event (``ddl_history``).

It never imports :mod:`cdc_platform.source.reading` (import-linter keeps the rooms apart).
"""
