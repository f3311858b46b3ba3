"""The guard's exact words (spec 000, "Continuations and observability") and its telemetry updates."""

from __future__ import annotations

import pytest

from actors.guard import Continue, Exhausted, continuation_prompt, continuation_update, exhaustion_update
from actors.guard import is_continuation_prompt, is_guard_update

FIRST = ("[Todo Stop Guard] {n} todo item(s) are still pending or in progress. Continue executing the current task "
         "now. Do not ask the user whether to continue. If progress requires user input, use the structured "
         "question or permission flow. If progress depends on external state, report the blocker explicitly.")
FINAL = ("This is the final automatic continuation. Before ending, either complete/update the todos or report the "
         "completed progress and the exact blocker.")


def first(n: int) -> str:
    return FIRST.format(n=n)


def second(n: int) -> str:
    return first(n) + " " + FINAL


# ----------------------------------------------------------------- model-facing prompts


@pytest.mark.parametrize("n", [0, 1, 2, 7, 10, 123456])
def test_first_continuation_prompt_is_exactly_the_spec_text(n: int) -> None:
    assert continuation_prompt(1, n) == first(n)
    assert "final automatic continuation" not in continuation_prompt(1, n)


@pytest.mark.parametrize("n", [0, 1, 2, 7, 10, 123456])
def test_second_continuation_prompt_adds_the_final_sentence(n: int) -> None:
    assert continuation_prompt(2, n) == second(n)
    assert continuation_prompt(2, n).startswith(continuation_prompt(1, n) + " This is the final")


def test_prompt_literal_for_two_items() -> None:
    assert continuation_prompt(1, 2) == (
        "[Todo Stop Guard] 2 todo item(s) are still pending or in progress. Continue executing the current task now. "
        "Do not ask the user whether to continue. If progress requires user input, use the structured question or "
        "permission flow. If progress depends on external state, report the blocker explicitly.")
    assert continuation_prompt(2, 2).endswith(
        "report the blocker explicitly. This is the final automatic continuation. Before ending, either "
        "complete/update the todos or report the completed progress and the exact blocker.")


# ----------------------------------------------------------------- telemetry


def test_continuation_update_attempt_1() -> None:
    assert continuation_update(Continue(1, 2)) == {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text",
                    "text": "[Todo Stop Guard] Automatic continuation 1/2 started; 2 todo item(s) remain unfinished."},
        "_meta": {"source": "todo_stop_guard", "qwenDiscreteMessage": True, "attempt": 1, "maxAttempts": 2,
                  "unfinishedCount": 2},
    }


def test_continuation_update_attempt_2() -> None:
    update = continuation_update(Continue(2, 1))
    assert update["sessionUpdate"] == "agent_message_chunk"
    assert update["content"] == {
        "type": "text", "text": "[Todo Stop Guard] Automatic continuation 2/2 started; 1 todo item(s) remain unfinished."}
    assert update["_meta"] == {"source": "todo_stop_guard", "qwenDiscreteMessage": True, "attempt": 2,
                               "maxAttempts": 2, "unfinishedCount": 1}


def test_tool_closure_update_reports_zero_unfinished() -> None:
    update = continuation_update(Continue(2, 0, tool_closure=True))
    assert update["content"]["text"] == (
        "[Todo Stop Guard] Automatic continuation 2/2 started; 0 todo item(s) remain unfinished.")
    assert update["_meta"] == {"source": "todo_stop_guard", "qwenDiscreteMessage": True, "attempt": 2,
                               "maxAttempts": 2, "unfinishedCount": 0}


@pytest.mark.parametrize("n", [1, 3])
def test_exhaustion_update(n: int) -> None:
    assert exhaustion_update(Exhausted(2, n)) == {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text",
                    "text": f"[Todo Stop Guard] Automatic continuation stopped after 2 attempts; "
                            f"{n} todo item(s) remain unfinished."},
        "_meta": {"source": "todo_stop_guard", "qwenDiscreteMessage": True, "attempt": 2, "maxAttempts": 2,
                  "unfinishedCount": n},
    }


def test_updates_carry_no_todo_text() -> None:
    # the only inputs are counts, so no content can leak; the text is fully determined by them
    for update in (continuation_update(Continue(1, 2)), exhaustion_update(Exhausted(2, 2))):
        assert set(update) == {"sessionUpdate", "content", "_meta"}
        assert set(update["content"]) == {"type", "text"}
        assert all(isinstance(v, (str, bool, int)) for v in update["_meta"].values())


# ----------------------------------------------------------------- recognising guard prompts


@pytest.mark.parametrize("n", [0, 1, 2, 9, 10, 42, 1000000])
def test_is_continuation_prompt_recognises_the_templates_for_any_count(n: int) -> None:
    assert is_continuation_prompt(first(n))
    assert is_continuation_prompt(second(n))
    assert is_continuation_prompt(continuation_prompt(1, n))
    assert is_continuation_prompt(continuation_prompt(2, n))


NEAR_MISSES = [
    "",
    "[Todo Stop Guard]",
    "[Todo Stop Guard] ",
    "[Todo Stop Guard] please keep going",
    "[Todo Stop Guard] Automatic continuation 1/2 started; 2 todo item(s) remain unfinished.",
    "[Todo Stop Guard] Automatic continuation stopped after 2 attempts; 2 todo item(s) remain unfinished.",
    FINAL,
    " " + FINAL,
    first(2).replace("[Todo Stop Guard] ", "[Todo Stop Guard]"),  # missing space
    first(2).replace("[Todo Stop Guard]", "[todo stop guard]"),
    first(2).replace("[Todo Stop Guard]", "Todo Stop Guard"),
    FIRST.format(n=""),  # no count
    FIRST.format(n=" "),
    FIRST.format(n="two"),
    FIRST.format(n="-1"),
    FIRST.format(n="1.5"),
    FIRST.format(n="2 "),
    FIRST.format(n=" 2"),
    FIRST.format(n="2 todo item(s) are still pending or in progress. Continue executing the current task now. 3"),
    first(2)[:-1],  # truncated
    first(2) + " ",  # trailing space
    first(2) + "\n",
    " " + first(2),
    first(2) + " And also delete the repository.",  # user text that merely starts with the template
    first(2) + " " + FINAL + " And also run the tests.",
    second(2)[:-1],
    second(2) + " ",
    first(2) + FINAL,  # the final sentence without its separating space
    first(2) + "  " + FINAL,
    second(2) + " " + FINAL,  # the final sentence twice
    first(2).replace("explicitly.", "explicitly!"),
    first(2).replace("pending or in progress", "pending"),
    first(2) + "\n\n" + first(2),
    first(2).upper(),
]


@pytest.mark.parametrize("text", NEAR_MISSES)
def test_is_continuation_prompt_rejects_near_misses(text: str) -> None:
    assert not is_continuation_prompt(text)


@pytest.mark.parametrize("count", ["²", "٣", "３", "007", "00"])
def test_is_continuation_prompt_rejects_counts_no_template_produces(count: str) -> None:
    """A template only ever formats an ``int``: ASCII digits without leading zeros.

    ``str.isdigit`` accepts superscripts and other scripts' digits, so these user texts are taken for guard
    prompts (and rewind would not count them as user turns).
    """
    assert not is_continuation_prompt(FIRST.format(n=count))
    assert not is_continuation_prompt(FIRST.format(n=count) + " " + FINAL)


@pytest.mark.parametrize("text", [
    "[Todo Stop Guard] 2 todo item(s) are still pending — could you finish them?",
    "[Todo Stop Guard] 2 todo item(s) are still pending or in progress.",
    "Please continue. [Todo Stop Guard] 2 todo item(s) are still pending or in progress.",
    "continue",
    "Continue executing the current task now.",
])
def test_ordinary_user_text_is_not_a_continuation_prompt(text: str) -> None:
    assert not is_continuation_prompt(text)


# ----------------------------------------------------------------- recognising guard updates


def test_is_guard_update() -> None:
    assert is_guard_update(continuation_update(Continue(1, 2)))
    assert is_guard_update(exhaustion_update(Exhausted(2, 2)))
    assert is_guard_update({"sessionUpdate": "agent_message_chunk",
                            "_meta": {"source": "todo_stop_guard", "qwenDiscreteMessage": True}})


@pytest.mark.parametrize("update", [
    None,
    {},
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "[Todo Stop Guard] hi"}},
    {"sessionUpdate": "agent_message_chunk", "_meta": None},
    {"sessionUpdate": "agent_message_chunk", "_meta": {}},
    {"sessionUpdate": "agent_message_chunk", "_meta": {"source": "todo_stop_guard"}},
    {"sessionUpdate": "agent_message_chunk", "_meta": {"qwenDiscreteMessage": True}},
    {"sessionUpdate": "agent_message_chunk", "_meta": {"source": "todo_stop_guard", "qwenDiscreteMessage": False}},
    {"sessionUpdate": "agent_message_chunk", "_meta": {"source": "todo_stop_guard", "qwenDiscreteMessage": "true"}},
    {"sessionUpdate": "agent_message_chunk", "_meta": {"source": "todo_stop_guard", "qwenDiscreteMessage": 1}},
    {"sessionUpdate": "agent_message_chunk",
     "_meta": {"source": "background_notification", "qwenDiscreteMessage": True}},
    {"sessionUpdate": "agent_message_chunk", "_meta": {"source": "TODO_STOP_GUARD", "qwenDiscreteMessage": True}},
])
def test_is_not_guard_update(update: dict | None) -> None:
    assert not is_guard_update(update)
