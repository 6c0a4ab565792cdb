"""The binlog stream: the dump connection's events assembled into transactions of ChangeEvents."""
