"""The compiled validator (``jsonschema_rs``) decides tool arguments; ``jsonschema``
words the rejection.  These tests hold the two to the same verdict on every
builtin tool's schema and on generated arguments, and check the fallbacks."""

from __future__ import annotations

import json

import jsonschema
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ongridd.config import structure
from ongridd.errors import ToolArgumentsError
from ongridd.plugins.build import RegistryBuilder
from ongridd.tools import args as args_mod
from ongridd.tools.args import schema_key, validate_arguments
from ongridd.tools.schema_check import check_schema

JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8)


def builtin_schemas(tmp_path_factory) -> list[tuple[str, dict]]:
    state = tmp_path_factory.mktemp("state")
    config = structure({"state_dir": str(state)})
    result = RegistryBuilder(config=config).build_sync(extra_paths=[])
    return sorted((name, tool.parameters) for name, tool in result.contributions.tools.items())


@pytest.fixture(scope="module")
def schemas(tmp_path_factory) -> list[tuple[str, dict]]:
    found = builtin_schemas(tmp_path_factory)
    assert len(found) >= 10, found  # the builtin plugins' tools are all there
    return found


def python_verdict(schema: dict, value) -> bool:
    return jsonschema.Draft202012Validator(json.loads(schema_key(schema))).is_valid(value)


def test_every_builtin_schema_compiles_for_the_fast_validator(schemas) -> None:
    for name, schema in schemas:
        assert args_mod._fast_validator_for(schema_key(schema)) is not None, name
        check_schema(schema)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_both_validators_agree_on_generated_arguments(schemas, data) -> None:
    name, schema = data.draw(st.sampled_from(schemas))
    props = sorted((schema.get("properties") or {}).keys())
    keys = st.sampled_from(props) if props else st.text(max_size=6)
    value = data.draw(st.dictionaries(keys | st.text(max_size=4), JSON, max_size=len(props) + 1))
    fast = args_mod._fast_is_valid(args_mod._validators(schema)[1], value)
    assert fast is python_verdict(schema, value), (name, value)


def test_rejection_words_the_python_messages() -> None:
    schema = {"type": "object", "properties": {"limit": {"type": "integer", "minimum": 1}},
              "required": ["limit"], "additionalProperties": False}
    with pytest.raises(ToolArgumentsError, match="field 'limit': expected integer, got string"):
        validate_arguments("t", schema, {"limit": "3"})
    with pytest.raises(ToolArgumentsError, match="missing required field"):
        validate_arguments("t", schema, {})
    assert validate_arguments("t", schema, {"limit": 2}) == {"limit": 2}


def test_a_pattern_the_fast_engine_lacks_falls_back_to_jsonschema() -> None:
    schema = {"type": "object", "properties": {"unit": {"type": "string", "pattern": r"^[a-z]+\Z"}}}
    assert args_mod._fast_validator_for(schema_key(schema)) is None  # \Z is Python-only
    assert validate_arguments("t", schema, {"unit": "nginx"}) == {"unit": "nginx"}
    with pytest.raises(ToolArgumentsError, match="does not match"):
        validate_arguments("t", schema, {"unit": "Nginx"})


def test_an_integer_beyond_64_bits_is_decided_by_jsonschema() -> None:
    schema = {"type": "object", "properties": {"n": {"type": "integer", "maximum": 10}}}
    with pytest.raises(ToolArgumentsError, match="field 'n'"):
        validate_arguments("t", schema, {"n": 2**80})
    assert validate_arguments("t", schema, {"n": -(2**70)}) == {"n": -(2**70)}


def test_an_invalid_schema_is_refused_with_jsonschema_s_message() -> None:
    with pytest.raises(jsonschema.SchemaError, match="is not valid under any of the given schemas"):
        check_schema({"type": "objec"})
    with pytest.raises(jsonschema.SchemaError):
        check_schema({"type": "object", "properties": {"x": {"minimum": "one"}}})
    check_schema({"type": "object", "properties": {"x": {"minimum": 1}}})
