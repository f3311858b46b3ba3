"""Every sentence a run says: prompts to the subagent, done lines, status lines.

``goal_reached`` is a label, never a gate: it is self-reported by a subagent
that has just been told it has not reached the goal, which is exactly the
incentive to claim it. So every rendering of it here says it was
self-reported, and the turn cap says out loud that the goal was never
reported reached.
"""

from __future__ import annotations

from typing import Any

# The four ends the spec names, plus two a parent and a failing runner add.
END_REASONS = ("no_goal", "goal_reached", "need_help", "turn_cap", "stopped", "error")

SELF_REPORTED = "self-reported by the subagent; the daemon did not verify it"

END_LABELS = {
    "no_goal": "no_goal (no goal was set; the run was its one turn)",
    "goal_reached": f"goal_reached ({SELF_REPORTED})",
    "need_help": "need_help (the subagent is blocked and asked for help)",
    "turn_cap": "turn_cap (the harness limit was reached; the goal was never reported reached)",
    "stopped": "stopped (by the parent)",
    "error": "error (the runner failed)",
}

SIGNAL_HINT = (
    "Report through the tools of the \"trellis\" MCP server: call goal_reached (optional summary, and "
    "report_file if you wrote a report) once the goal is reached, or need_help with your question if you "
    "cannot go on without help."
)


def subagent_system_prompt(brief: str, goal: str | None) -> str:
    """What a ``session`` runner's child session adds to its system prompt: who it is working for."""
    lines = ["# Subagent",
             "You are a subagent: a parent agent started you for one task and sees only what you report. "
             "Your brief:", brief.strip()]
    if goal is not None:
        lines.append(f"Goal: {goal.strip()}")
    lines.append(SIGNAL_HINT)
    return "\n".join(lines)


def first_brief(brief: str, goal: str | None) -> str:
    """What the first turn is told."""
    if goal is None:
        return f"{brief}\n\n{SIGNAL_HINT}"
    return f"{brief}\n\nGoal: {goal}\n\n{SIGNAL_HINT}"


def reprompt(goal: str, turn: int, max_turns: int) -> str:
    """The re-prompt of a later turn: the goal has not been reported reached."""
    return (f"You haven't reported the goal reached yet. This is turn {turn} of {max_turns}.\n\n"
            f"Goal: {goal}\n\nKeep working toward it. {SIGNAL_HINT}")


def turn_line(turn: int, max_turns: int, detail: str) -> str:
    return f"Turn {turn} of {max_turns} ended ({detail})."


def goal_reached_line(summary: str | None, named_report: str | None) -> str:
    text = f"goal_reached — {SELF_REPORTED}."
    if summary:
        text += f" Summary: {summary}"
    if named_report:
        text += f" The subagent says it wrote its report to {named_report}."
    return text


def need_help_line(question: str) -> str:
    return f"need_help — the subagent is blocked and asks: {question}"


def end_line(reason: str, turn: int, max_turns: int, detail: str = "") -> str:
    """The line that closes a run's done message, one per end reason."""
    if reason == "no_goal":
        return "Run ended: no goal was set, so the run was its one turn (end reason: no_goal)."
    if reason == "goal_reached":
        return f"Run ended at turn {turn} of {max_turns}: goal_reached, {SELF_REPORTED} (end reason: goal_reached)."
    if reason == "need_help":
        return f"Run ended at turn {turn} of {max_turns}: the subagent needs help (end reason: need_help)."
    if reason == "turn_cap":
        return (f"Run ended: the harness limit of {max_turns} turn(s) was reached and the goal was never "
                f"reported reached (end reason: turn_cap).")
    if reason == "stopped":
        return f"Run stopped at turn {turn} of {max_turns}: {detail or 'by the parent'} (end reason: stopped)."
    return f"Run failed at turn {turn} of {max_turns}: {detail} (end reason: error)."


def status_text(status: dict[str, Any]) -> str:
    """The answer a person reads; always carries ``turn N of M``."""
    head = (f"Subagent {status['name']!r}: {status['state']}, turn {status['turn']} of {status['maxTurns']}; "
            f"last event {status['lastEventAgeS']:.1f} s ago; ")
    reason = status["endReason"]
    if reason is None:
        head += "end reason: none yet (underway)."
    else:
        head += f"end reason: {END_LABELS[reason]}."
    if status.get("question"):
        head += f"\nQuestion: {status['question']}"
    for vote in status.get("waitingForVote") or ():
        child = status.get("childSessionId")
        head += (f"\nWaiting for a permission vote in session {child}: {vote['title']} (request "
                 f"{vote['requestId']}). Only a client of that session answers it: `trellis attach --session "
                 f"{child}`, the browser UI, or POST /session/{child}/permission/{vote['requestId']}; a session "
                 "runner's children ask nothing with subagents.runners.session.approvalMode set.")
    if status.get("done"):
        head += "\n" + status["done"]
    return head
