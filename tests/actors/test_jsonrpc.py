"""actors/wire/jsonrpc.py against the JSON-RPC 2.0 specification (https://www.jsonrpc.org/specification).

The section numbers are the specification's; the examples of its §7 are here
nearly verbatim. The property test feeds the reader any JSON value (and any
bytes): it yields a well-formed message, batch or error, and never raises.
"""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actors.wire import jsonrpc
from actors.wire.jsonrpc import (
    SPEC_IDS, STRING_OR_INTEGER_IDS, Batch, IdRule, Invalid, Request, Response, RpcError, parse, read,
)


def answer_to(message: Request | Response | Invalid, result: Any = 19) -> dict[str, Any] | None:
    """What a server following the rules sends back: unknown methods -32601, else ``result``."""
    if not jsonrpc.needs_answer(message):
        return None
    if isinstance(message, Invalid):
        return message.response()
    assert isinstance(message, Request)
    if message.method not in ("subtract", "sum", "get_data"):
        return jsonrpc.error_response(message.id, jsonrpc.method_not_found(message.method))
    return jsonrpc.result_response(message.id, result)


# --------------------------------------------------------------------------- §7, the specification's examples


def test_calls_with_positional_and_named_params():
    assert parse(b'{"jsonrpc": "2.0", "method": "subtract", "params": [42, 23], "id": 1}') \
        == Request("subtract", [42, 23], 1)
    named = parse(b'{"jsonrpc": "2.0", "method": "subtract", "params": {"subtrahend": 23, "minuend": 42}, "id": 3}')
    assert named == Request("subtract", {"subtrahend": 23, "minuend": 42}, 3)
    assert not named.is_notification
    assert jsonrpc.result_response(3, 19) == {"jsonrpc": "2.0", "result": 19, "id": 3}


def test_a_notification_has_no_id_and_gets_no_answer():
    note = parse(b'{"jsonrpc": "2.0", "method": "update", "params": [1,2,3,4,5]}')
    assert note == Request("update", [1, 2, 3, 4, 5]) and note.is_notification
    assert not jsonrpc.needs_answer(note)
    assert jsonrpc.batch_answer([answer_to(note)]) is None


def test_an_unknown_method_is_minus_32601_with_the_call_s_id():
    call = parse(b'{"jsonrpc": "2.0", "method": "foobar", "id": "1"}')
    assert answer_to(call) == {"jsonrpc": "2.0", "error": {"code": -32601, "message": "Method not found: foobar"},
                               "id": "1"}


def test_invalid_json_is_minus_32700_with_a_null_id():
    for raw in (b'{"jsonrpc": "2.0", "method": "foobar, "params": "bar", "baz]', b"", b"\xff", "\ud800",
                b'[{"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"}, {"jsonrpc": "2.0", "method"]'):
        refused = parse(raw)
        assert isinstance(refused, Invalid)
        assert refused.response()["id"] is None and refused.error.code == jsonrpc.PARSE_ERROR
        assert refused.error.message.startswith("Parse error: ")


def test_an_invalid_request_object_is_minus_32600_with_a_null_id():
    refused = parse(b'{"jsonrpc": "2.0", "method": 1, "params": "bar"}')
    assert isinstance(refused, Invalid)
    assert refused.response() == {"jsonrpc": "2.0", "id": None,
                                  "error": {"code": -32600, "message": "Invalid Request: method must be a string"}}


def test_an_empty_array_is_one_error_not_an_array():
    refused = parse(b"[]")
    assert isinstance(refused, Invalid) and refused.error.code == -32600 and refused.id is None


def test_a_batch_of_non_messages_gets_one_error_each():
    for raw, count in ((b"[1]", 1), (b"[1,2,3]", 3)):
        batch = parse(raw)
        assert isinstance(batch, Batch) and len(batch.messages) == count
        answer = jsonrpc.batch_answer(answer_to(m) for m in batch.messages)
        assert answer == [{"jsonrpc": "2.0", "id": None,
                           "error": {"code": -32600, "message": "Invalid Request: expected a JSON object"}}] * count


def test_a_mixed_batch_is_answered_per_member_in_order_and_notifications_by_nothing():
    batch = parse(b"""[
        {"jsonrpc": "2.0", "method": "sum", "params": [1,2,4], "id": "1"},
        {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]},
        {"jsonrpc": "2.0", "method": "subtract", "params": [42,23], "id": "2"},
        {"foo": "boo"},
        {"jsonrpc": "2.0", "method": "foo.get", "params": {"name": "myself"}, "id": "5"},
        {"jsonrpc": "2.0", "method": "get_data", "id": "9"}
    ]""")
    assert isinstance(batch, Batch)
    answer = jsonrpc.batch_answer(answer_to(m) for m in batch.messages)
    assert [(a["id"], a.get("error", {}).get("code")) for a in answer] == [
        ("1", None), ("2", None), (None, -32600), ("5", -32601), ("9", None)]


def test_a_batch_of_notifications_answers_nothing_at_all():
    batch = parse(b'[{"jsonrpc": "2.0", "method": "notify_sum", "params": [1,2,4]},'
                  b' {"jsonrpc": "2.0", "method": "notify_hello", "params": [7]}]')
    assert isinstance(batch, Batch)
    assert jsonrpc.batch_answer(answer_to(m) for m in batch.messages) is None  # not [] (§6)


def test_a_batch_inside_a_batch_is_an_invalid_member():
    batch = parse(b'[[{"jsonrpc": "2.0", "method": "m", "id": 1}]]')
    assert isinstance(batch, Batch) and isinstance(batch.messages[0], Invalid)


# --------------------------------------------------------------------------- ids (§4)


@pytest.mark.parametrize("raw_id", ["abc", "", 0, -7, 2**63, 1.5, 2.0, None])
def test_the_spec_allows_string_number_and_null_ids(raw_id):
    call = read({"jsonrpc": "2.0", "method": "m", "id": raw_id})
    assert isinstance(call, Request) and call.id == raw_id
    assert not call.is_notification  # a null id is discouraged, but it is a call: it gets an answer
    assert jsonrpc.needs_answer(call)


@pytest.mark.parametrize("raw_id", [True, False, [1], {"a": 1}, float("nan"), float("inf")])
def test_ids_that_are_no_string_number_or_null_are_refused_with_a_null_id(raw_id):
    refused = read({"jsonrpc": "2.0", "method": "m", "id": raw_id})
    assert isinstance(refused, Invalid) and refused.error.code == -32600 and refused.id is None


@pytest.mark.parametrize("raw_id, accepted", [
    ("abc", True), (7, True), (-1, True), (1.5, False), (2.0, False), (None, False), (True, False),
])
def test_string_or_integer_ids_narrow_the_rule(raw_id, accepted):
    outcome = read({"jsonrpc": "2.0", "method": "m", "id": raw_id}, ids=STRING_OR_INTEGER_IDS)
    assert isinstance(outcome, Request) is accepted
    if not accepted:
        assert outcome.error.message == "Invalid Request: id must be a string or an integer"


def test_the_id_of_an_attempted_request_is_echoed_when_it_is_valid():
    wrong_version = read({"jsonrpc": "1.0", "method": "m", "id": "a"})
    no_version = read({"method": "m", "id": 7})
    bad_params = read({"jsonrpc": "2.0", "method": "m", "id": 3, "params": "str"})
    assert [(o.error.code, o.id) for o in (wrong_version, no_version, bad_params)] == [
        (-32600, "a"), (-32600, 7), (-32600, 3)]
    # Not a request (no method): its id names a call of ours, never one of theirs, so it is not echoed.
    assert read({"jsonrpc": "2.0", "id": 4}).id is None
    assert read({"jsonrpc": "1.0", "id": 4, "result": 1}).id is None


# --------------------------------------------------------------------------- requests (§4) and responses (§5)


@pytest.mark.parametrize("params", [None, "str", 5, True])
def test_params_are_an_object_or_an_array_when_present(params):
    refused = read({"jsonrpc": "2.0", "method": "m", "id": 1, "params": params})
    assert isinstance(refused, Invalid) and refused.error.code == -32600 and refused.id == 1
    assert read({"jsonrpc": "2.0", "method": "m", "params": []}) == Request("m", [])


def test_an_empty_method_is_a_string_and_so_a_request():
    assert read({"jsonrpc": "2.0", "method": "", "id": 1}) == Request("", None, 1)


def test_responses_carry_exactly_one_of_result_and_error():
    assert read({"jsonrpc": "2.0", "id": 1, "result": None}) == Response(1, None)
    error = {"code": -32000, "message": "busy", "data": {"code": "x"}}
    failed = read({"jsonrpc": "2.0", "id": "a", "error": error})
    assert failed == Response("a", error=error)
    assert RpcError.from_dict(failed.error).to_dict() == error
    for both_or_neither in ({"jsonrpc": "2.0", "id": 1, "result": 1, "error": {"code": 1, "message": "m"}},
                            {"jsonrpc": "2.0", "id": 1}):
        refused = read(both_or_neither)
        assert isinstance(refused, Invalid) and refused.error.code == -32600 and refused.id is None


@pytest.mark.parametrize("error", ["bad", None, {"message": "m"}, {"code": "1", "message": "m"},
                                   {"code": True, "message": "m"}, {"code": 1.5, "message": "m"}, {"code": 1}])
def test_an_error_object_has_an_integer_code_and_a_string_message(error):
    refused = read({"jsonrpc": "2.0", "id": 1, "error": error})
    assert isinstance(refused, Invalid) and refused.error.code == -32600


def test_a_null_response_id_goes_with_an_error_whatever_the_id_rule():
    error = {"code": -32700, "message": "Parse error"}
    for ids in (SPEC_IDS, STRING_OR_INTEGER_IDS):
        assert read({"jsonrpc": "2.0", "id": None, "error": error}, ids=ids) == Response(None, error=error)
    # A result with a null id answers a call whose id was null: only where null ids are allowed.
    assert read({"jsonrpc": "2.0", "id": None, "result": 1}) == Response(None, 1)
    assert isinstance(read({"jsonrpc": "2.0", "id": None, "result": 1}, ids=STRING_OR_INTEGER_IDS), Invalid)
    assert isinstance(read({"jsonrpc": "2.0", "id": 1.5, "result": 1}, ids=STRING_OR_INTEGER_IDS), Invalid)


# --------------------------------------------------------------------------- building messages and errors


def test_builders():
    assert jsonrpc.request(1, "m") == {"jsonrpc": "2.0", "id": 1, "method": "m"}
    assert jsonrpc.request("a", "m", {"x": 1}) == {"jsonrpc": "2.0", "id": "a", "method": "m", "params": {"x": 1}}
    assert jsonrpc.notification("n", [1]) == {"jsonrpc": "2.0", "method": "n", "params": [1]}
    assert jsonrpc.notification("n") == {"jsonrpc": "2.0", "method": "n"}
    assert jsonrpc.error_response(None, RpcError(-32000, "busy")) == {
        "jsonrpc": "2.0", "id": None, "error": {"code": -32000, "message": "busy"}}
    assert jsonrpc.invalid_params("expected a string", "$.cwd").to_dict() == {
        "code": -32602, "message": "Invalid params: expected a string at $.cwd", "data": {"path": "$.cwd"}}
    assert jsonrpc.internal_error("KeyError: 'x'").to_dict()["data"] == {"details": "KeyError: 'x'"}
    assert jsonrpc.encode(jsonrpc.request(1, "m")) == b'{"jsonrpc":"2.0","id":1,"method":"m"}'
    # What a client sent is quoted back as an excerpt only.
    assert len(jsonrpc.method_not_found("m" * 100_000).message) < 200


def test_what_is_built_reads_back():
    for message in (jsonrpc.request(1, "m", [1]), jsonrpc.notification("n", {"a": 1}),
                    jsonrpc.result_response("x", {"r": 1}), jsonrpc.error_response(2, RpcError(-1, "no", [3]))):
        assert not isinstance(parse(jsonrpc.encode(message)), Invalid)


# --------------------------------------------------------------------------- any input: a well-formed outcome


TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12)  # JSON text has no lone surrogate
SCALARS = (st.none() | st.booleans() | st.integers(min_value=-(2**63), max_value=2**64 - 1)
           | st.floats(allow_nan=False, allow_infinity=False) | TEXT)
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
                    max_leaves=12)
IDS = st.one_of(TEXT, st.integers(min_value=-(2**63), max_value=2**63 - 1), st.floats(allow_nan=False,
                allow_infinity=False), st.none(), st.booleans())
ERRORS = st.fixed_dictionaries({}, optional={"code": st.integers(-40000, 40000) | JSON, "message": TEXT | JSON,
                                             "data": JSON}) | JSON
# Mostly message-shaped objects: random JSON alone would seldom come near a request.
MESSAGES = st.fixed_dictionaries({}, optional={
    "jsonrpc": st.sampled_from(["2.0", "1.0"]) | JSON, "id": IDS | JSON, "method": TEXT | JSON,
    "params": st.lists(JSON, max_size=3) | st.dictionaries(TEXT, JSON, max_size=3) | JSON,
    "result": JSON, "error": ERRORS})
NEARLY_MESSAGES = st.fixed_dictionaries({"jsonrpc": st.just("2.0")}, optional={
    "id": IDS, "method": TEXT, "params": st.lists(JSON, max_size=3) | st.dictionaries(TEXT, JSON, max_size=3),
    "result": JSON, "error": st.fixed_dictionaries({"code": st.integers(-40000, 40000), "message": TEXT},
                                                   optional={"data": JSON})})
ANY_INPUT = st.one_of(JSON, MESSAGES, NEARLY_MESSAGES, st.lists(NEARLY_MESSAGES | MESSAGES | JSON, max_size=5))


def check_well_formed(outcome: Any, ids: IdRule, *, in_batch: bool = False) -> None:
    if isinstance(outcome, Batch):
        assert not in_batch and outcome.messages
        for member in outcome.messages:
            check_well_formed(member, ids, in_batch=True)
    elif isinstance(outcome, Request):
        assert isinstance(outcome.method, str)
        assert outcome.params is None or isinstance(outcome.params, (dict, list))
        assert outcome.id is None if outcome.is_notification else ids.accepts(outcome.id)
    elif isinstance(outcome, Response):
        assert (outcome.error is None) or outcome.result is None
        if outcome.error is not None:
            assert type(outcome.error["code"]) is int and isinstance(outcome.error["message"], str)
        assert ids.accepts(outcome.id) or (outcome.id is None and outcome.error is not None)
    else:
        assert isinstance(outcome, Invalid)
        assert outcome.error.code in (jsonrpc.PARSE_ERROR, jsonrpc.INVALID_REQUEST)
        assert outcome.id is None or ids.accepts(outcome.id)
        answer = outcome.response()
        assert set(answer) == {"jsonrpc", "id", "error"} and answer["jsonrpc"] == "2.0"
        assert set(answer["error"]) == {"code", "message"} and isinstance(answer["error"]["message"], str)
        assert orjson.loads(jsonrpc.encode(answer)) == answer


@settings(max_examples=600, derandomize=True, database=None, deadline=None)
@given(ANY_INPUT, st.sampled_from([SPEC_IDS, STRING_OR_INTEGER_IDS]))
def test_any_json_value_reads_as_a_well_formed_message_batch_or_error(value, ids):
    outcome = read(value, ids=ids)
    check_well_formed(outcome, ids)
    # The text path agrees with the value path.
    assert type(parse(orjson.dumps(value), ids=ids)) is type(outcome)
    if isinstance(value, dict) and isinstance(outcome, Request):
        assert outcome.method == value["method"] and outcome.is_notification == ("id" not in value)


@settings(max_examples=300, derandomize=True, database=None, deadline=None)
@given(st.binary(max_size=64) | TEXT.map(str.encode))
def test_any_bytes_parse_without_raising(raw):
    check_well_formed(parse(raw), SPEC_IDS)
