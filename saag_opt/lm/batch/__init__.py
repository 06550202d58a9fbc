"""OpenAI's Batch API: rounds of independent calls sent as one job each, and its offline double."""
