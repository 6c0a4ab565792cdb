"""Full-list reconciliation of a destination: source tables against their mirrors."""
