"""saag."""
