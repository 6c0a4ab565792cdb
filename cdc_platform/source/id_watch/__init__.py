"""Tables without a binlog: new rows found by watching an increasing id (docs/id_watch.md)."""
