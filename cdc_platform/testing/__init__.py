"""Helpers shipped with the engine for tests, benchmarks and the local demo.

Real servers (MariaDB with binlog, ZooKeeper) started as private processes on 127.0.0.1, and
small fakes of the engine's own interfaces. Nothing here is imported by the engine itself.
"""
