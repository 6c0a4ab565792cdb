"""Side writers: rows read from the source merged into the change log beside the binlog.

The snapshot (:mod:`.snapshot`, :mod:`.new_tables`) and the repair writer (:mod:`.repair`)
share the watermark segment (:mod:`.segments`), the stop that interrupts them when their
lease goes (:mod:`.stop`) and the way a writer takes a lease (:mod:`.lease`). Beneath both the
streaming runtime and the reconciliation: it imports neither.
"""
