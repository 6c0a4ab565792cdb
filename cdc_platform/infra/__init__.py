"""Building blocks beneath both ``ha/`` and ``watch/`` (and the id watch): one home each.

:mod:`~cdc_platform.infra.clock` is time as the lease, the state watch and the id watch see it
(tests inject a fake one); :mod:`~cdc_platform.infra.sqldb` is the small SQL layer the lease
table, the node registry and the state watch share; :mod:`~cdc_platform.infra.zookeeper` holds
the ZooKeeper client settings and the bounded client stop both ZooKeeper users need;
:mod:`~cdc_platform.infra.recorder` the metrics interface every layer reports to.
"""
