"""The ``security`` verb: AgentDojo's prompt-injection suites with and without the guard, as a resumable run."""
