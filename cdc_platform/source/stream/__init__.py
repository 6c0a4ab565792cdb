"""The binlog stream: the dump connection's events assembled into transactions of ChangeEvents.

What it offers: :class:`binlog.BinlogSource` (the stream a destination's run reads), where a
destination without a checkpoint starts (``start_position``), and beneath them the pieces of the
hot path: the dump connection the library reads on and the control connection beside it
(``dump_connection``, ``control_connection``), the check of a server switched behind the address
(``server_switch``), table maps, the lean rows framing, the decode pool and its worker
processes, the transaction assembler over its boundary state (``transactions``, ``boundaries``)
with its refusals, XA transactions held between PREPARE and COMMIT (and found again after a
switched primary), and what DDL does to the rows (``ddl_effects``) or may have done to a
column's type since an event (``ddl_history``).

It never imports :mod:`cdc_platform.source.reading` (import-linter keeps the rooms apart).
"""
