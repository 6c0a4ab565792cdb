"""Side writers: rows read from the source merged into the change log beside the binlog.

The snapshot (:mod:`.snapshot`, :mod:`.new_tables`) and the repair writer (:mod:`.repair`)
share the watermark segment (:mod:`.segments`) and the stop that interrupts them when their
lease goes (:mod:`.stop`); they take the lease the one way every writer does
(:mod:`cdc_platform.coordination.lease`). Requests for them reach the lease holder through
one inbox (:mod:`.request_inbox`: repairs and ad-hoc snapshots, typed; claims and signs of
life in :mod:`.request_folder`, signatures in :mod:`.request_signing`). Beneath both the
streaming runtime and the reconciliation: it imports neither.
"""
