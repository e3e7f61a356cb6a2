"""What the kernel itself tells the model (kept in one place so the wording
is reviewed together).  Every note starts with ``[ongrid]`` so a transcript
reader can tell it from the user's words."""

from __future__ import annotations

LENGTH_CUT_NOT_RUN = (
    "your output was cut off at the model's output limit (finish_reason=length) before this call was "
    "complete, so nothing was run. Issue the call again with shorter arguments, or answer in fewer words."
)


def text_tool_call_note(name: str) -> str:
    """The user-role note after a tool call written as text (``name``: what the model tried)."""
    tried = f" ({name})" if name and name != "?" else ""
    return (
        f"[ongrid] Your last message wrote a tool call as text{tried}. Text is not executed and nothing was "
        "run. To use a tool, call it through the tools API (a function call), not in your message text. "
        "If you have enough information, reply with your final answer as plain prose."
    )


def limit_note(reason: str, *, max_turns: int, tool_budget: int | None) -> str:
    """The instruction of the forced last model call (sent, never stored)."""
    if reason == "tool_budget":
        what = f"The tool budget of this run ({tool_budget} tool calls) is used up."
    else:
        what = f"This run has used all of its {max_turns} model turns."
    return (
        f"[ongrid] {what} Do not call any tools. Write your final answer now from the evidence gathered so "
        "far, and say clearly what you could not check."
    )


def budget_not_run(tool_budget: int) -> str:
    return (
        f"the tool budget of this run ({tool_budget} tool calls) is used up. Answer from the evidence "
        "you already have."
    )


def stop_detail(reason: str, *, turns: int, max_turns: int, tool_calls: int, tool_budget: int | None,
                text_tool_calls: int) -> str:
    """A one-line explanation of a limit stop (``RunResult.detail``)."""
    if reason == "tool_budget":
        out = f"stopped after {tool_calls} tool calls: the tool budget is {tool_budget}"
    else:
        out = f"stopped after {turns} model calls: max_turns is {max_turns}"
    if text_tool_calls:
        out += (f"; the model wrote a tool call as text instead of using the tools API {text_tool_calls} "
                f"time{'s' if text_tool_calls != 1 else ''}")
    return out


def wrap_reminder(reminder: str) -> str:
    """``reminder`` inside ``<system-reminder>`` tags unless it already is."""
    text = reminder.strip()
    if text.startswith("<system-reminder>"):
        return text
    return f"<system-reminder>\n{text}\n</system-reminder>"
