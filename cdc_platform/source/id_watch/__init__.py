"""Tables without a binlog: new rows found by watching an increasing id (docs/id_watch.md).

What it offers: :class:`watch.IdWatchSource` (a source polling tables by increasing id and
repaired by periodic full lists), its persisted state (``state``), the checked tables with
their small queries (``tables``), the transactions it emits (``emitter``) and the expired-row
cleanup (``cleanup``). It sits above the stream and the side reads and uses both.
"""
