"""saag-opt: measure and improve the reviewer of a tool-calling LLM agent."""

__version__ = "0.1.0"
