"""Confluent wire format against confluent-kafka's in-process mock registry (no server here)."""

from __future__ import annotations

import json
from uuid import uuid4

import pytest
from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from runfacts.schemas.catalog import default_catalog
from runfacts.schemas.codec import Codec
from runfacts.schemas.errors import ConfigError, InvalidInput
from runfacts.schemas.events import ToolCallFailed
from runfacts.schemas.registry import RegistrySchemaIds, RegistrySettings, registry_codec
from runfacts.schemas.spec.samples import sample

CATALOG = default_catalog()


@pytest.fixture
def codec() -> Codec:
    return registry_codec(RegistrySettings(url=f"mock://{uuid4().hex}"))


def _client(codec: Codec) -> SchemaRegistryClient:
    assert isinstance(codec.schema_ids, RegistrySchemaIds)
    return codec.schema_ids.client


def test_encode_writes_magic_byte_and_schema_id_when_registry_is_configured(codec: Codec) -> None:
    entry = CATALOG.by_type["approval.required"]
    data = codec.encode_dict(sample(entry))
    schema_id = int.from_bytes(data[1:5], "big")
    assert data[0] == 0
    registered = _client(codec).get_schema(schema_id)
    assert json.loads(registered.schema_str) == entry.raw
    assert data[5:] == codec.body(codec.decode(data))


def test_decode_reads_both_framings_when_registry_is_configured(codec: Codec) -> None:
    values = sample(CATALOG.by_type["run.create"])
    framed = codec.encode_dict(values)
    single = Codec().encode_dict(values)
    assert codec.decode(framed) == codec.decode(single) == Codec().decode(single)


def test_subject_is_the_record_full_name_when_schema_is_registered(codec: Codec) -> None:
    codec.encode_dict(sample(CATALOG.by_type["approval.granted"]))
    assert "runfacts.events.ApprovalGranted" in _client(codec).get_subjects()


def test_old_version_is_upcast_when_read_through_the_registry(codec: Codec) -> None:
    v1 = CATALOG.entry("tool.call.failed", 1)
    values = sample(v1)
    values["payload"]["errorClass"] = "Timeout"
    model = codec.decode(codec.encode_dict(values, version=1))
    assert isinstance(model, ToolCallFailed)
    assert (model.schemaVersion, model.payload.errorClass) == (2, "timeout")


def test_decode_raises_invalid_input_when_schema_id_is_unknown(codec: Codec) -> None:
    data = bytes([0]) + (424242).to_bytes(4, "big") + b"\x02"
    with pytest.raises(InvalidInput, match="schema id 424242 is not a shipped runfacts schema"):
        codec.decode(data)


def test_decode_raises_invalid_input_when_id_names_a_foreign_schema(codec: Codec) -> None:
    foreign = Schema(json.dumps({"type": "record", "name": "Other", "fields": [
        {"name": "x", "type": "string"}]}), "AVRO")
    schema_id = _client(codec).register_schema("other", foreign)
    with pytest.raises(InvalidInput, match=f"schema id {schema_id} is not a shipped"):
        codec.decode(bytes([0]) + schema_id.to_bytes(4, "big") + b"\x02x")


def test_decode_raises_invalid_input_when_confluent_bytes_meet_a_codec_without_registry(
        codec: Codec) -> None:
    data = codec.encode_dict(sample(CATALOG.by_type["approval.required"]))
    with pytest.raises(InvalidInput, match="no schema registry is configured"):
        Codec().decode(data)


def test_lookup_only_codec_reuses_ids_when_another_producer_registered(codec: Codec) -> None:
    entry = CATALOG.by_type["approval.required"]
    data = codec.encode_dict(sample(entry))
    reader = Codec(codec.settings, CATALOG,
                   RegistrySchemaIds(_client(codec), CATALOG, auto_register=False))
    assert reader.encode_dict(sample(entry)) == data


def test_connect_raises_config_error_when_url_has_no_known_scheme() -> None:
    with pytest.raises(ConfigError, match="registry url='ftp://x'"):
        RegistrySchemaIds.connect(RegistrySettings(url="ftp://x"))
