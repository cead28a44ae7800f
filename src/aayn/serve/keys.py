"""API keys and request limits as LibreTranslate keeps them: keys in a SQLite file with LibreTranslate's own schema
(`api_keys`: `api_key`, `req_limit` per minute, `char_limit`; a LibreTranslate `db/api_keys.db` serves as it is), read
again within `CACHE_SECONDS` (a key added or removed while the server runs takes effect without a restart), and a
moving one-minute window of requests per client (its key where keys are on and it sends one, else its address).

What a request meets (`Access.admit`), in LibreTranslate's order: over its client's limit, 429 `Slowdown: N per 1
minute`; with keys on (`--api_keys`), an unknown key 403 `Invalid API key`, and no key where one is required (a
request from an origin other than `--require_api_key_origin`'s, or without the page's secret under
`--require_api_key_secret`) 400 `Please contact the server operator to get an API key`. A request counts once,
however many texts or sentences it holds."""

from __future__ import annotations

import re
import secrets
import sqlite3
import threading
import time
import uuid
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from .settings import RequestError

DEFAULT_DB = "db/api_keys.db"  # LibreTranslate's --api-keys-db-path default
CACHE_SECONDS = 5.0
WINDOW_SECONDS = 60.0
SCHEMA = """CREATE TABLE IF NOT EXISTS api_keys (
    "api_key" TEXT NOT NULL,
    "req_limit" INTEGER NOT NULL,
    "char_limit" INTEGER DEFAULT NULL,
    PRIMARY KEY("api_key")
);"""


class KeyDatabase:
    """The keys of a SQLite file (created, with its folder, where missing)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self._connect() as connection:
                connection.execute(SCHEMA)
                columns = [row[1] for row in connection.execute("PRAGMA table_info(api_keys)")]
                if "char_limit" not in columns:  # a database of LibreTranslate before 1.3
                    connection.execute('ALTER TABLE api_keys ADD COLUMN "char_limit" INTEGER DEFAULT NULL')
        except (OSError, sqlite3.Error) as error:
            raise ValueError(f"--api_keys_db_path {path}: cannot open it as a keys database ({error})") from None
        self.cache: dict[str, tuple[float, tuple | None]] = {}
        self.lock = threading.Lock()

    def _connect(self) -> sqlite3.Connection:
        return sqlite3.connect(self.path, timeout=10)

    def lookup(self, key: str) -> tuple[int, int | None] | None:
        """(requests per minute, characters per text or None) of `key`, or None where it is not a key."""
        now = time.monotonic()
        with self.lock:
            cached = self.cache.get(key)
            if cached is not None and now - cached[0] < CACHE_SECONDS:
                return cached[1]
        with self._connect() as connection:
            row = connection.execute("SELECT req_limit, char_limit FROM api_keys WHERE api_key = ?", (key,)).fetchone()
        with self.lock:
            if len(self.cache) > 10_000:  # keys looked up by clients: unknown ones too; forget the old
                self.cache = {k: v for k, v in self.cache.items() if now - v[0] < CACHE_SECONDS}
            self.cache[key] = (now, tuple(row) if row else None)
        return tuple(row) if row else None

    def add(self, req_limit: int, key: str | None = None, char_limit: int | None = None) -> str:
        """A key (a new UUID where none is given, as `ltmanage keys add`); `char_limit` 0 or None: the server's."""
        key = key or str(uuid.uuid4())
        with self._connect() as connection:
            connection.execute("DELETE FROM api_keys WHERE api_key = ?", (key,))
            connection.execute(
                "INSERT INTO api_keys (api_key, req_limit, char_limit) VALUES (?, ?, ?)",
                (key, req_limit, char_limit or None),
            )
        return key

    def remove(self, key: str) -> bool:
        with self._connect() as connection:
            return connection.execute("DELETE FROM api_keys WHERE api_key = ?", (key,)).rowcount > 0

    def all(self) -> list[tuple[str, int, int | None]]:
        with self._connect() as connection:
            return [tuple(row) for row in connection.execute("SELECT api_key, req_limit, char_limit FROM api_keys")]


class Window:
    """Requests per client over the last minute (a moving window)."""

    def __init__(self):
        self.times: dict[str, deque] = {}
        self.lock = threading.Lock()

    def hit(self, client: str, limit: int) -> bool:
        """Counts one request of `client`; False (not counted) where it already made `limit` this minute."""
        now = time.monotonic()
        with self.lock:
            times = self.times.setdefault(client, deque())
            while times and now - times[0] >= WINDOW_SECONDS:
                times.popleft()
            if len(times) >= limit:
                return False
            times.append(now)
            if len(self.times) > 100_000:  # clients gone quiet: forget them
                self.times = {c: t for c, t in self.times.items() if t and now - t[-1] < WINDOW_SECONDS}
            return True


@dataclass
class Access:
    """Who may ask what: `keys` (None: keys off, every request keyless), `req_limit` (requests per minute per
    client, -1: none), `require_origin` (a regular expression an Origin header must match to go without a key),
    `require_secret` (keyless requests must carry the page's `secret`)."""

    keys: KeyDatabase | None = None
    req_limit: int = -1
    require_origin: str | None = None
    require_secret: bool = False
    secret: str = field(default_factory=lambda: secrets.token_urlsafe(12))
    window: Window = field(default_factory=Window)

    @property
    def key_required(self) -> bool:
        """What LibreTranslate's `/frontend/settings` reports as `keyRequired`."""
        return self.keys is not None and bool(self.require_origin)

    def admit(self, key, address: str, origin: str = "", secret=None) -> int | None:
        """Lets one request through, or RequestError (429, 403, 400); returns the character limit of its key
        (None: the server's)."""
        key = key if isinstance(key, str) and key else None
        found = self.keys.lookup(key) if self.keys is not None and key else None
        limit = found[0] if found else self.req_limit
        client = key if self.keys is not None and key else address
        if limit >= 0 and not self.window.hit(client, limit):
            raise RequestError(f"Slowdown: {limit} per 1 minute", 429)
        if self.keys is None:
            return None
        if key and found is None:
            raise RequestError("Invalid API key", 403)
        if found is None:
            need = bool(self.require_origin) and not re.match(self.require_origin, origin or "")
            need = need or (self.require_secret and secret != self.secret)
            if need:
                raise RequestError("Please contact the server operator to get an API key")
        return found[1] if found else None


def client_address(headers, client) -> str:
    """The client's address as LibreTranslate takes it: the first of X-Forwarded-For, else the peer's."""
    forwarded = headers.get("x-forwarded-for")
    if forwarded:
        return forwarded.split(",")[0].strip()
    return client.host if client else "127.0.0.1"


def read_key_file(path: str) -> list[str]:
    """A key file of the old `--api_keys FILE`: one key a line (blank lines and `#` comments skipped)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError:
        raise FileNotFoundError(f"--api_keys {path}: no such file") from None
    keys = [line.strip() for line in lines if line.strip() and not line.lstrip().startswith("#")]
    if not keys:
        raise ValueError(f"--api_keys {path} holds no key (one a line)")
    return keys


def access_of(args) -> Access:
    """The server's `Access` from its flags; the old key file (`--api_keys FILE`) is added to the database."""
    if (args.require_api_key_origin or args.require_api_key_secret) and not args.api_keys:
        raise ValueError("--require_api_key_origin and --require_api_key_secret need --api_keys (keys on)")
    if args.req_limit < -1:
        raise ValueError(f"--req_limit must be >= 0, or -1 for none; got {args.req_limit}")
    if args.require_api_key_origin:
        try:
            re.compile(args.require_api_key_origin)
        except re.error as error:
            raise ValueError(f"--require_api_key_origin {args.require_api_key_origin}: {error}") from None
    keys = KeyDatabase(args.api_keys_db_path) if args.api_keys else None
    if isinstance(args.api_keys, str):
        known = {row[0] for row in keys.all()}
        for key in read_key_file(args.api_keys):
            if key not in known:
                keys.add(args.req_limit, key)
    return Access(keys, args.req_limit, args.require_api_key_origin, args.require_api_key_secret)


def keys_command(verb: list[str], path: str, char_limit: int | None, key: str | None = None) -> None:
    """`aayn serve keys`, `... keys add REQ_LIMIT [--char_limit N] [--key KEY]`, `... keys remove KEY`, as `ltmanage
    keys`, its flags before or after the words."""
    usage = "aayn serve keys [add REQ_LIMIT [--char_limit N] [--key KEY] | remove KEY] [--api_keys_db_path FILE]"
    if verb[0] != "keys" or len(verb) > 3 or (len(verb) > 1 and verb[1] not in ("add", "remove")):
        raise ValueError(f"aayn serve takes no argument {' '.join(verb)!r}; to manage keys: {usage}")
    database = KeyDatabase(path)
    if len(verb) == 1:
        for listed, req_limit, key_char_limit in database.all():
            print(f"{listed}: {req_limit} requests a minute, {key_char_limit or 'the server'}'s character limit")
        return
    if len(verb) != 3:
        raise ValueError(f"aayn serve keys {verb[1]} needs {'REQ_LIMIT' if verb[1] == 'add' else 'KEY'}: {usage}")
    if verb[1] == "remove":
        if not database.remove(verb[2]):
            raise ValueError(f"aayn serve keys remove: no key {verb[2]} in {path}")
        print(f"removed {verb[2]}")
        return
    try:
        req_limit = int(verb[2])
    except ValueError:
        raise ValueError(
            f"aayn serve keys add: REQ_LIMIT must be a whole number of requests a minute, got {verb[2]}"
        ) from None
    if req_limit < 0:
        raise ValueError(f"aayn serve keys add: REQ_LIMIT must be >= 0, got {req_limit}")
    if key is not None and not key.strip():
        raise ValueError("aayn serve keys add: --key is empty (leave it out for a new UUID)")
    print(database.add(req_limit, key, char_limit=char_limit))
