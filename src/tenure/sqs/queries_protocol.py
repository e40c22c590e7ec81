"""The query protocol (API version 2012-11-05): form-encoded ``Action=...`` parameters in, XML out.

:func:`params_of` turns the flattened form (``Attribute.1.Name``, ``MessageAttribute.1.Value.
StringValue``, ``SendMessageBatchRequestEntry.2.Id``...) into the AWS JSON 1.0 shapes the actions
take, and :func:`result_xml` turns their replies back into the query protocol's XML, so both
protocols run the same code."""

from __future__ import annotations

from typing import Any
from urllib.parse import parse_qsl
from xml.sax.saxutils import escape

from tenure.sqs.errors import SqsError

XMLNS = "http://queue.amazonaws.com/doc/2012-11-05/"
_LISTS = {"AttributeName": "AttributeNames", "MessageAttributeName": "MessageAttributeNames",
          "MessageSystemAttributeName": "MessageSystemAttributeNames", "TagKey": "TagKeys",
          "AWSAccountId": "AWSAccountIds", "ActionName": "Actions"}


def form_of(body: bytes, query: bytes) -> dict[str, str]:
    """The request's parameters: the URL's query string, then the form body (which wins)."""
    try:
        pairs = parse_qsl(query.decode(), keep_blank_values=True) + parse_qsl(body.decode(), keep_blank_values=True)
    except UnicodeDecodeError:
        raise SqsError("InvalidParameterValue", "The request parameters are not valid UTF-8.") from None
    return dict(pairs)


def _tree(form: dict[str, str]) -> dict[str, Any]:
    root: dict[str, Any] = {}
    for key, value in form.items():
        parts = key.split(".")
        node = root
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise SqsError("InvalidParameterValue", f"Parameter {key} conflicts with another.")
        node[parts[-1]] = value
    return root


def _items(node: Any) -> list[Any]:
    """A numbered list (``{"1": a, "2": b}``) in index order."""
    if not isinstance(node, dict):
        return []
    return [node[k] for k in sorted((k for k in node if k.isdigit()), key=int)]


def _convert(node: dict[str, Any], action: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "Attribute":
            out["Attributes"] = {i.get("Name"): i.get("Value", "") for i in _items(value) if isinstance(i, dict)}
        elif key == "Tag":
            tags = {i.get("Key"): i.get("Value", "") for i in _items(value) if isinstance(i, dict)}
            out["tags" if action == "CreateQueue" else "Tags"] = tags
        elif key in ("MessageAttribute", "MessageSystemAttribute"):
            out[key + "s"] = {i.get("Name"): i.get("Value", {}) for i in _items(value) if isinstance(i, dict)}
        elif key in _LISTS:
            out[_LISTS[key]] = _items(value)
        elif key.endswith("BatchRequestEntry"):
            out["Entries"] = [_convert(i, action) if isinstance(i, dict) else {} for i in _items(value)]
        elif key not in ("Action", "Version"):
            out[key] = value
    return out


def params_of(action: str, form: dict[str, str]) -> dict[str, Any]:
    return _convert(_tree(form), action)


def _el(name: str, inner: str) -> str:
    return f"<{name}>{inner}</{name}>"


def _value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return escape(str(value))


def _struct(value: dict[str, Any], action: str) -> str:
    return "".join(_node(k, v, action) for k, v in value.items())


def _node(key: str, value: Any, action: str) -> str:
    if key in ("QueueUrls", "queueUrls"):
        return "".join(_el("QueueUrl", _value(u)) for u in value)
    if key == "Attributes":
        return "".join(_el("Attribute", _el("Name", _value(k)) + _el("Value", _value(v))) for k, v in value.items())
    if key == "MessageAttributes":
        return "".join(_el("MessageAttribute", _el("Name", _value(k)) + _el("Value", _struct(v, action)))
                       for k, v in value.items())
    if key == "Tags":
        return "".join(_el("Tag", _el("Key", _value(k)) + _el("Value", _value(v))) for k, v in value.items())
    if key == "Messages":
        return "".join(_el("Message", _struct(m, action)) for m in value)
    if key == "Successful":
        return "".join(_el(f"{action}ResultEntry", _struct(e, action)) for e in value)
    if key == "Failed":
        return "".join(_el("BatchResultErrorEntry", _struct(e, action)) for e in value)
    if key == "Results":
        return "".join(_el(f"{action}ResultEntry", _struct(e, action)) for e in value)
    if isinstance(value, dict):
        return _el(key, _struct(value, action))
    return _el(key, _value(value))


def result_xml(action: str, result: dict[str, Any], request_id: str) -> str:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<{action}Response xmlns="{XMLNS}">'
            f"<{action}Result>{_struct(result, action)}</{action}Result>"
            f"<ResponseMetadata><RequestId>{request_id}</RequestId></ResponseMetadata></{action}Response>")


def error_xml(exc: SqsError, request_id: str) -> str:
    return (f'<?xml version="1.0" encoding="UTF-8"?>\n<ErrorResponse xmlns="{XMLNS}"><Error>'
            f"<Type>{exc.fault}</Type><Code>{escape(exc.code)}</Code><Message>{escape(exc.message)}</Message>"
            f"<Detail/></Error><RequestId>{request_id}</RequestId></ErrorResponse>")
