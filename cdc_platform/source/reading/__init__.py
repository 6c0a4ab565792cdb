"""Side reads of a table over SQL: keyset pages, exact row images, key lookups (snapshots, repair,
comparison).
"""
