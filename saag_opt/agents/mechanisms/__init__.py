"""Review mechanisms: how the base agent, a reviewer and the SAAG cascade combine (docs/design.md §3, §5)."""
