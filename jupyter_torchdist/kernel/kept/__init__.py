"""Kept ranks: N ranks started once that run cell after cell with their state kept, until stopped."""
