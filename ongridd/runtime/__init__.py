"""The multi-agent runtime: coordinator sessions, workers, AgentTool,
dedup, review gate, SendMessage, TaskStop, audit (DESIGN.md §4, §8–§12)."""
