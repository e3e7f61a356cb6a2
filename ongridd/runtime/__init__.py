"""The multi-agent runtime: coordinator sessions, workers, AgentTool,
dedup, review gate, SendMessage, TaskStop, audit (docs/architecture.md §4, §8–§12)."""
