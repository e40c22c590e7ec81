"""Pure logic of `tenure ui`: the filter parser, prefixes, the users file, roles and CSRF
checks, and the OpenAPI document against the routes served (issue 24)."""

from __future__ import annotations

import base64
from datetime import datetime, timezone
from pathlib import Path

import bcrypt
import pytest

from tenure.core.errors import ConfigError
from tenure.ui import api, flow_api, openapi
from tenure.ui.auth import Authenticator, AuthError, Identity, load_users
from tenure.ui.config import UiConfig, normalise_prefix
from tenure.ui.filters import FilterError, filter_to_query, parse_cursor, parse_filter, parse_limit


def test_filters_parse_every_field_and_round_trip() -> None:
    flt = parse_filter({"id": "7", "queue": "q", "status": "failed", "task": "t", "priority_min": "-5",
                        "priority_max": "10", "created_since": "2h", "finished_since": "2026-12-01T00:00:00Z",
                        "idempotency_key": "k", "payload": '{"a": 1}', "flow_key": "tenant:é", "cursor": "9"},
                       extra=("cursor",))
    assert flt.id == 7 and flt.priority_min == -5 and flt.created_within == 7200 and flt.created_after is None
    assert flt.finished_after == datetime(2026, 12, 1, tzinfo=timezone.utc) and flt.payload == '{"a": 1}'
    assert flt.flow_key == "tenant:é"
    assert parse_filter(filter_to_query(flt)) == flt
    assert parse_filter({"queue": "", "status": None}).is_empty()
    assert parse_filter({"payload": {"nested": {"x": [1]}}}).payload == '{"nested": {"x": [1]}}'


@pytest.mark.parametrize("values", [{"status": "done"}, {"id": "0"}, {"id": "x"}, {"priority_min": "200"},
                                    {"priority_min": "3", "priority_max": "2"}, {"payload": "[1]"},
                                    {"payload": "{"}, {"created_since": "soon"}, {"colour": "red"},
                                    {"queue": "x" * 501}, {"id": True}, {"flow_key": ""}, {"flow_key": " "},
                                    {"flow_key": "é" * 101}, {"flow_key": "a\x00b"}, {"flow_key": 7}])
def test_bad_filters_raise_one_message(values: dict[str, object]) -> None:
    with pytest.raises(FilterError):
        parse_filter(values)


def test_paging_parameters() -> None:
    assert parse_limit(None, 50, 500) == 50 and parse_limit("10", 50, 500) == 10
    assert parse_cursor("") is None and parse_cursor("12") == 12
    for bad in ("0", "501", "x"):
        with pytest.raises(FilterError):
            parse_limit(bad, 50, 500)
    with pytest.raises(FilterError):
        parse_cursor("-1")


def test_prefixes_are_normalised_or_refused() -> None:
    assert normalise_prefix("/tenure/") == "/tenure" and normalise_prefix("/") == "" and normalise_prefix(None) == ""
    assert normalise_prefix("/a/b.c") == "/a/b.c"
    for bad in ("tenure", "/a b", "/a/../b?x", "//"):
        with pytest.raises(ConfigError):
            normalise_prefix(bad)
    with pytest.raises(ConfigError):
        UiConfig(dsn="x", schema="s", bind="nohost").validate()


def _users(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "users"
    path.write_text(text)
    return path


def test_users_file_lines_and_errors(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    users = load_users(str(_users(tmp_path, f"# comment\n\nada:{hashed}:admin\nproxy-only:-:viewer\n")))
    assert {u.name: u.role for u in users.values()} == {"ada": "admin", "proxy-only": "viewer"}
    for text, message in ((f"ada:{hashed}:root\n", "role"), ("ada:plain:admin\n", "bcrypt"),
                          (f"ada:{hashed}:admin\nada:{hashed}:viewer\n", "twice"), ("# nobody\n", "no users")):
        with pytest.raises(ConfigError, match=message):
            load_users(str(_users(tmp_path, text)))
    with pytest.raises(ConfigError, match="cannot read"):
        load_users(str(tmp_path / "missing"))


def _basic(user: str, password: str) -> dict[str, str]:
    return {"authorization": "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()}


def test_roles_read_only_and_basic_auth(tmp_path: Path) -> None:
    hashed = bcrypt.hashpw(b"pw", bcrypt.gensalt(rounds=4)).decode()
    users = load_users(str(_users(tmp_path, f"ada:{hashed}:admin\nvic:{hashed}:viewer\np:-:admin\n")))
    auth = Authenticator(users=users, trusted_header=None, read_only=False)
    assert auth.identify(_basic("ada", "pw")) == Identity("ada", "admin")
    assert auth.identify(_basic("vic", "pw")).can_write is False
    for headers in ({}, _basic("ada", "nope"), _basic("p", ""), {"authorization": "Basic !!"}, {"authorization": "Bearer x"}):
        with pytest.raises(AuthError) as exc:
            auth.identify(headers)
        assert exc.value.status == 401
    assert Authenticator(users=users, trusted_header=None, read_only=True).identify(_basic("ada", "pw")).role == "viewer"
    assert Authenticator(users=None, trusted_header=None, read_only=False).identify({}).role == "admin"
    proxy = Authenticator(users=users, trusted_header="X-Forwarded-User", read_only=False)
    assert proxy.identify({"x-forwarded-user": "p"}).role == "admin"
    assert proxy.identify({"x-forwarded-user": "stranger"}).role == "viewer"
    with pytest.raises(AuthError):
        proxy.identify({})


def test_mutation_checks_role_form_types_origin_and_token() -> None:
    auth = Authenticator(users=None, trusted_header=None, read_only=False)
    admin, viewer = Identity("a", "admin"), Identity("v", "viewer")
    own = {"http://ui:8080"}
    token = auth.csrf_token(admin)
    auth.check_mutation(admin, {"content-type": "application/json"}, own_origins=own)
    auth.check_mutation(admin, {}, own_origins=own)
    auth.check_mutation(admin, {"origin": "http://ui:8080", "x-csrf-token": token}, own_origins=own)
    for who, headers in ((viewer, {}), (admin, {"content-type": "text/plain"}),
                         (admin, {"origin": "http://evil", "x-csrf-token": token}),
                         (admin, {"sec-fetch-site": "cross-site", "x-csrf-token": token}),
                         (admin, {"origin": "http://ui:8080"}), (admin, {"origin": "http://ui:8080", "x-csrf-token": "x"})):
        with pytest.raises(AuthError) as exc:
            auth.check_mutation(who, headers, own_origins=own)
        assert exc.value.status == 403
    assert auth.csrf_token(admin) != auth.csrf_token(viewer)


def test_openapi_documents_exactly_the_served_routes() -> None:
    paths = openapi.document("/p")["paths"]
    served = {f"/{path}": method.lower() for method, path, _, _ in api.ROUTES + flow_api.ROUTES} | {"/events": "get"}
    assert set(paths) == set(served)
    for path, method in served.items():
        assert method in paths[path], path
    assert openapi.document("/p")["servers"] == [{"url": "/p/api/v1"}]
