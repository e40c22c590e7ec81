"""Who is asking `tenure ui`, and what they may do (issue 24, item 6).

Three modes, chosen by the command line:

- ``--users FILE``: HTTP basic auth against lines ``USER:BCRYPT_HASH:ROLE`` (role ``admin`` or
  ``viewer``; blank lines and ``#`` comments skipped). A wrong or missing password is 401.
- ``--trusted-user-header NAME`` (an authenticating proxy in front, e.g. oauth2-proxy's
  ``X-Forwarded-User``): the header names the user; a request without it is 401. The role is
  the user's in ``--users FILE`` when given (their hash is not checked: the proxy
  authenticated them; ``-`` may stand for it), else ``viewer``. Only a proxy may be able to
  reach the UI in this mode: anyone who can connect can send the header.
- neither: everyone who can connect is ``admin`` (the server binds to loopback by default).

``--read-only`` makes everyone a viewer. A viewer may read everything and change nothing: every
mutating request gets 403.

CSRF: a mutation is ``application/json`` or has no body; a form's content types (what a
cross-site form, or a request that skips the CORS preflight, can send) are refused. A browser's
mutation (one that carries ``Origin`` or ``Sec-Fetch-Site``) must also be same-origin and carry
``X-CSRF-Token``: the token the page embeds, an HMAC of the user's name with this process's
random key. Scripts (no ``Origin``) need only their credentials.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass

from tenure.core.colon_file import colon_lines
from tenure.core.errors import ConfigError

ROLES = ("admin", "viewer")
FORM_TYPES = frozenset({"application/x-www-form-urlencoded", "multipart/form-data", "text/plain"})
"""The content types a cross-site HTML form (or a CORS-simple request) can send."""
_USER = re.compile(r"^[A-Za-z0-9_.@+-]{1,128}$")


class AuthError(Exception):
    """A request refused: ``status`` 401 (who are you?) or 403 (not allowed)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class User:
    name: str
    password_hash: str
    role: str


@dataclass(frozen=True)
class Identity:
    user: str
    role: str

    @property
    def can_write(self) -> bool:
        return self.role == "admin"


def load_users(path: str) -> dict[str, User]:
    """Parse the users file; ConfigError names the file and line of the first bad line."""
    users: dict[str, User] = {}
    for lineno, parts in colon_lines(path, "--users", "USER:BCRYPT_HASH:ROLE"):
        name, hashed, role = parts
        if not _USER.match(name):
            raise ConfigError(f"{path}:{lineno}: invalid user name {name!r}")
        if role not in ROLES:
            raise ConfigError(f"{path}:{lineno}: role must be admin or viewer, not {role!r}")
        if hashed != "-" and not re.match(r"^\$2[abxy]?\$\d\d\$[./A-Za-z0-9]{53}$", hashed):
            raise ConfigError(f"{path}:{lineno}: the hash of {name!r} is not a bcrypt hash ($2b$12$...)")
        if name in users:
            raise ConfigError(f"{path}:{lineno}: user {name!r} appears twice")
        users[name] = User(name, hashed, role)
    if not users:
        raise ConfigError(f"--users {path} has no users")
    return users


class Authenticator:
    """Turns a request's headers into an :class:`Identity` (or refuses it)."""

    def __init__(self, *, users: dict[str, User] | None, trusted_header: str | None, read_only: bool) -> None:
        self.users = users
        self.trusted_header = trusted_header.lower() if trusted_header else None
        self.read_only = read_only
        self.key = secrets.token_bytes(32)
        self._verified: dict[tuple[str, str], bool] = {}
        """(user, password sha256) already checked: bcrypt costs ~0.2 s per check."""

    @property
    def challenge(self) -> str | None:
        """The WWW-Authenticate value of a 401, when basic auth is the mode."""
        return 'Basic realm="tenure", charset="UTF-8"' if self.users is not None and not self.trusted_header else None

    def identify(self, headers: Mapping[str, str]) -> Identity:
        if self.trusted_header:
            name = headers.get(self.trusted_header, "").strip()
            if not name:
                raise AuthError(401, f"missing {self.trusted_header} header: sign in through the proxy")
            user = self.users.get(name) if self.users else None
            return self._limit(Identity(name, user.role if user else "viewer"))
        if self.users is None:
            return self._limit(Identity("anonymous", "admin"))
        name, password = _basic(headers.get("authorization", ""))
        user = self.users.get(name)
        if user is None or user.password_hash == "-" or not self._check(user, password):
            raise AuthError(401, "wrong user name or password")
        return self._limit(Identity(name, user.role))

    def _limit(self, identity: Identity) -> Identity:
        return Identity(identity.user, "viewer") if self.read_only else identity

    def _check(self, user: User, password: str) -> bool:
        import bcrypt
        digest = hashlib.sha256(password.encode()).hexdigest()
        key = (user.name, digest + user.password_hash)
        known = self._verified.get(key)
        if known is None:
            try:
                known = bcrypt.checkpw(password.encode(), user.password_hash.encode())
            except ValueError:
                known = False
            if len(self._verified) > 1000:
                self._verified.clear()
            self._verified[key] = known
        return known

    def csrf_token(self, identity: Identity) -> str:
        return hmac.new(self.key, identity.user.encode(), hashlib.sha256).hexdigest()

    def check_mutation(self, identity: Identity, headers: Mapping[str, str], *, own_origins: set[str]) -> None:
        """Refuse (403) a mutation by a viewer, a cross-site or token-less browser request, or
        one that is not JSON."""
        if not identity.can_write:
            raise AuthError(403, "read-only: this user may not change anything" if not self.read_only
                            else "read-only: this UI was started with --read-only")
        content_type = headers.get("content-type", "").split(";")[0].strip().lower()
        if content_type in FORM_TYPES:
            raise AuthError(403, "a change must be sent as application/json (or without a body), not a form")
        origin = headers.get("origin")
        site = headers.get("sec-fetch-site")
        if origin is None and site is None:
            return
        if site is not None and site not in ("same-origin", "none"):
            raise AuthError(403, f"cross-site request refused (Sec-Fetch-Site: {site})")
        if origin is not None and origin not in own_origins:
            raise AuthError(403, f"cross-origin request refused (Origin: {origin})")
        token = headers.get("x-csrf-token", "")
        if not hmac.compare_digest(token, self.csrf_token(identity)):
            raise AuthError(403, "missing or wrong X-CSRF-Token: reload the page")


def _basic(header: str) -> tuple[str, str]:
    scheme, _, value = header.partition(" ")
    if scheme.lower() != "basic" or not value:
        raise AuthError(401, "sign in (HTTP basic auth)")
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        raise AuthError(401, "malformed basic auth header") from None
    name, sep, password = decoded.partition(":")
    if not sep:
        raise AuthError(401, "malformed basic auth header")
    return name, password
