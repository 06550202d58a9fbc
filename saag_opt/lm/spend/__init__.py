"""Money: cost per role, the hard ``--max-cost`` cap, and a run's ``costs.json``."""
