"""The parent of an SQS send span (issue 36): an X-Ray ``AWSTraceHeader`` converted to W3C, a
W3C ``traceparent`` message attribute, which one wins, and malformed carriers ignored."""

from __future__ import annotations

from typing import Any

import pytest

from tenure.core.tracing import parse_traceparent, traceparent_from_xray
from tenure.sqs.messages import trace_parent

XRAY = "Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8;Sampled=1"
FROM_XRAY = "00-5759e988bd862e3fe1be46a994272793-53995c3f42cd8ad8-01"
W3C = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.mark.parametrize(("header", "expected"), [
    (XRAY, FROM_XRAY),
    (XRAY.replace("Sampled=1", "Sampled=0"), FROM_XRAY[:-2] + "00"),
    (XRAY.replace("Sampled=1", "Sampled=?"), FROM_XRAY[:-2] + "00"),  # undecided: not sampled, as OTel's propagator
    (XRAY.replace(";Sampled=1", ""), FROM_XRAY[:-2] + "00"),
    ("Sampled=1; Parent=53995C3F42CD8AD8 ;Root=1-5759E988-BD862E3FE1BE46A994272793;Self=1-67891233-abc;Lineage=a:1",
     FROM_XRAY),  # any order, spaces, upper case, extra fields
    ("Root=1-5759e988-bd862e3fe1be46a994272793;Sampled=1", None),  # no Parent: nothing to be a child of
    ("Root=2-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad8", None),  # unknown version
    ("Root=1-5759e98-bd862e3fe1be46a9942727930;Parent=53995c3f42cd8ad8", None),  # 7 + 25 digits
    ("Root=1-5759e988-bd862e3fe1be46a99427279g;Parent=53995c3f42cd8ad8", None),
    ("Root=1-00000000-000000000000000000000000;Parent=53995c3f42cd8ad8", None),  # all-zero trace id
    ("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=0000000000000000", None),
    ("Root=1-5759e988-bd862e3fe1be46a994272793;Parent=53995c3f42cd8ad", None),
    ("garbage", None), ("", None), (None, None), (42, None),
])
def test_an_xray_header_becomes_a_w3c_parent_or_nothing(header: Any, expected: str | None) -> None:
    assert traceparent_from_xray(header) == expected


@pytest.mark.parametrize(("value", "expected"), [
    (W3C, W3C),
    (W3C[:-2] + "00", W3C[:-2] + "00"),
    (W3C[:-2] + "03", W3C),  # only the sampled flag is kept
    (" " + W3C + " ", W3C),
    ("01" + W3C[2:] + "-later-fields", W3C),  # a later version: its extra fields are ignored
    (W3C + "-x", None),  # version 00 has exactly four fields
    ("ff" + W3C[2:], None),
    (W3C.upper(), None),
    ("00-00000000000000000000000000000000-b7ad6b7169203331-01", None),
    ("00-0af7651916cd43dd8448eb211c80319c-0000000000000000-01", None),
    ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-1", None),
    ("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331", None),
    ("not a traceparent", None), (None, None),
])
def test_a_traceparent_is_validated_and_made_canonical(value: Any, expected: str | None) -> None:
    assert parse_traceparent(value) == expected


def _string(value: str) -> dict[str, str]:
    return {"DataType": "String", "StringValue": value}


def test_the_traceparent_attribute_wins_over_the_aws_trace_header_unless_malformed() -> None:
    assert trace_parent({"body": "b"}) is None
    assert trace_parent({"system_attributes": {"AWSTraceHeader": _string(XRAY)}}) == FROM_XRAY
    assert trace_parent({"attributes": {"traceparent": _string(W3C)}}) == W3C
    both = {"attributes": {"traceparent": _string(W3C)}, "system_attributes": {"AWSTraceHeader": _string(XRAY)}}
    assert trace_parent(both) == W3C
    bad_w3c = {"attributes": {"traceparent": _string("00-zz")}, "system_attributes": {"AWSTraceHeader": _string(XRAY)}}
    assert trace_parent(bad_w3c) == FROM_XRAY  # a malformed traceparent falls back to the header
    assert trace_parent({"attributes": {"traceparent": {"DataType": "Binary", "BinaryValue": "AAAA"}}}) is None
    assert trace_parent({"attributes": {"traceparent": {"DataType": "String.w3c", "StringValue": W3C}}}) == W3C
    assert trace_parent({"attributes": {"Traceparent": _string(W3C)}}) is None  # the name is exact
    assert trace_parent({"system_attributes": {"AWSTraceHeader": _string("Root=bad")}}) is None
