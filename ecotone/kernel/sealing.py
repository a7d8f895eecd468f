"""Sealed bytes: what a server hands out of a snapshot, readable and forgeable by no client.

An exported snapshot carries an env's whole state: hidden task fields, other seats' views, the
state of its random generators. So it leaves the server sealed, with authenticated encryption
(AES-256-GCM, from the `cryptography` package): a client can neither read it nor change a bit
of it, and a server opens only what a key of its own sealed. Replicas that must restore each
other's snapshots (a drained server's sessions resumed elsewhere) share the key: 32 random
bytes in a file, as `serve --snapshot-key-file FILE` (or `$ECOTONE_SNAPSHOTS_KEY_FILE`)
reads it. A server given none makes one of its own at start: its exports then restore only on
itself.

Layout of a sealed blob: a 4-byte magic (`ecS1`), a 12-byte random nonce, then the
ciphertext and its 16-byte tag; the magic is authenticated too. Nothing in a blob is looked
at, let alone decoded, before its tag checks.
"""

from __future__ import annotations

import os
import secrets
import stat
from pathlib import Path
from typing import Final

MAGIC: Final = b"ecS1"
"""The first bytes of a sealed blob (format 1)."""
KEY_BYTES: Final = 32
NONCE_BYTES: Final = 12
TAG_BYTES: Final = 16


class SealError(ValueError):
    """Bytes that are not a blob this key sealed (another key's, altered, cut short)."""


class Seal:
    """Seals and opens blobs with one key.

    Args:
        key: 32 bytes (AES-256).

    Example:
        >>> seal = Seal(bytes(32))
        >>> seal.open(seal.seal(b"state")) == b"state"
        True
    """

    __slots__ = ("_aead", "key")

    def __init__(self, key: bytes) -> None:
        if len(key) != KEY_BYTES:
            raise ValueError(f"a snapshot key is {KEY_BYTES} bytes, not {len(key)}")
        self.key = key
        self._aead: object | None = None

    @classmethod
    def random(cls) -> Seal:
        """A seal with a fresh random key (a server given none)."""
        return cls(secrets.token_bytes(KEY_BYTES))

    @classmethod
    def from_file(cls, path: str | Path) -> Seal:
        """The seal whose key `path` holds: 32 raw bytes, or 64 hex digits on a line.

        Raises:
            ValueError: The file holds no key of that form, or others than its owner may read
                or write it.
        """
        path = Path(path)
        mode = path.stat().st_mode
        if mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ValueError(
                f"snapshot key file {path} may be read or written by others than its owner "
                f"(mode {stat.filemode(mode)}): chmod 600 it"
            )
        data = path.read_bytes()
        if len(data) == KEY_BYTES:
            return cls(data)
        text = data.strip()
        try:
            key = bytes.fromhex(text.decode("ascii"))
        except (UnicodeDecodeError, ValueError):
            key = b""
        if len(key) != KEY_BYTES:
            raise ValueError(
                f"snapshot key file {path} holds no key: expected {KEY_BYTES} raw bytes or "
                f"{KEY_BYTES * 2} hex digits (make one with `ecotone keygen FILE`)"
            )
        return cls(key)

    @staticmethod
    def write_key(path: str | Path) -> Path:
        """Write a new random key to `path` (hex, mode 600; an existing file is kept).

        Atomic: the key is written whole to a file of its own, then linked in place, so that
        servers starting together on one shared directory (the replicas of a Deployment) all
        read the one key the first of them wrote, never a half-written file.

        Returns:
            The path.
        """
        path = Path(path)
        if path.exists():
            return path
        temporary = path.with_name(f".{path.name}.{secrets.token_hex(8)}")
        fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            with os.fdopen(fd, "w") as out:
                out.write(secrets.token_bytes(KEY_BYTES).hex() + "\n")
                out.flush()
                os.fsync(out.fileno())
            try:
                os.link(temporary, path)
            except FileExistsError:
                pass  # another server's key came first: that one is the key
        finally:
            os.unlink(temporary)
        return path

    def _cipher(self) -> object:
        if self._aead is None:  # imported on first use: a server that seals nothing pays nothing
            from cryptography.hazmat.primitives.ciphers.aead import AESGCM

            self._aead = AESGCM(self.key)
        return self._aead

    def seal(self, data: bytes, context: bytes = b"") -> bytes:
        """`data`, encrypted and authenticated, bound to `context` (authenticated, not
        stored: `open` must be given the same, so a blob cannot stand in for another's)."""
        nonce = secrets.token_bytes(NONCE_BYTES)
        sealed = self._cipher().encrypt(nonce, data, MAGIC + context)  # type: ignore[attr-defined]
        return MAGIC + nonce + sealed

    def open(self, blob: bytes, context: bytes = b"") -> bytes:
        """The bytes `seal` was given (with the same `context`).

        Raises:
            SealError: `blob` is not what this key sealed for `context`.
        """
        if len(blob) < len(MAGIC) + NONCE_BYTES + TAG_BYTES or blob[: len(MAGIC)] != MAGIC:
            raise SealError("not a sealed ecotone snapshot (wrong magic, or cut short)")
        from cryptography.exceptions import InvalidTag

        start = len(MAGIC)
        nonce, sealed = blob[start : start + NONCE_BYTES], blob[start + NONCE_BYTES :]
        try:
            return self._cipher().decrypt(nonce, sealed, MAGIC + context)  # type: ignore[attr-defined]
        except InvalidTag:
            raise SealError(
                "the snapshot's seal does not check: it was sealed with another key (a server "
                "with another --snapshot-key-file) or for another session, or altered"
            ) from None
