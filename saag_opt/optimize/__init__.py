"""optimize."""
