"""Shared ground: errors and outcomes, the typed config, the stream coordinator, cost, time."""
