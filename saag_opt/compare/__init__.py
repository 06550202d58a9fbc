"""The ``compare`` verb: reviewer prompt versions (or finished runs) measured side by side on the same examples."""
