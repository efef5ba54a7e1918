"""Batch-file bytes as streams: AES-256-CBC decryption (IV first, PKCS#7) composed with
zstd / gzip decompression, so plaintext never needs a disk file."""
from __future__ import annotations

import errno
import gzip
import io
import os
import zlib
from typing import Optional

import zstandard
from cryptography.hazmat.primitives import padding
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms, modes

from . import errors
from .params import Compression, Encryption, FileParams

CHUNK = 1 << 20            # ciphertext / plaintext read size
ZSTD_IN_CHUNK = 128 << 10  # compressed bytes per decompress() call: bounds the output held at once
_AES_BLOCK = 16


class BufferedRaw(io.RawIOBase):
    """Base for chunk-producing raw streams: subclasses implement _produce()."""

    def __init__(self):
        super().__init__()
        self._out = b""
        self._pos = 0
        self._done = False

    def readable(self) -> bool:
        return True

    def _produce(self) -> bytes:  # returns b"" only at the end
        raise NotImplementedError

    def readinto(self, b) -> int:
        while self._pos >= len(self._out):
            if self._done:
                return 0
            self._out = self._produce()
            self._pos = 0
            if not self._out:
                self._done = True
                return 0
        n = min(len(b), len(self._out) - self._pos)
        memoryview(b)[:n] = memoryview(self._out)[self._pos:self._pos + n]
        self._pos += n
        return n


class _AesCbcReader(BufferedRaw):
    """AES-256-CBC decryption as a stream, so plaintext never needs a disk file.

    The PKCS7 unpadder holds back the last block until finalize(), so padding
    is checked for real (a wrong key almost always shows up as bad padding).
    """

    def __init__(self, f, key: bytes, name: str):
        super().__init__()
        self._f = f
        self._name = name
        size = os.fstat(f.fileno()).st_size
        if size < 2 * _AES_BLOCK or (size - _AES_BLOCK) % _AES_BLOCK:
            raise errors.DecryptionError(
                f"file {name}: ciphertext is truncated or corrupt (length is not IV + whole AES blocks)")
        iv = _read_exact(f, _AES_BLOCK)
        if len(iv) != _AES_BLOCK:
            raise errors.DecryptionError(f"file {name}: ciphertext is truncated or corrupt (no IV)")
        self._dec = Cipher(algorithms.AES(key), modes.CBC(iv)).decryptor()
        self._unpad = padding.PKCS7(128).unpadder()

    def _produce(self) -> bytes:
        while not self._done:
            chunk = self._f.read(CHUNK)
            if chunk:
                out = self._unpad.update(self._dec.update(chunk))
                if out:
                    return out
                continue
            try:
                out = self._unpad.update(self._dec.finalize()) + self._unpad.finalize()
            except ValueError:
                raise errors.DecryptionError(
                    f"file {self._name}: decryption failed (bad padding: wrong key or corrupt file)") from None
            self._done = True
            return out
        return b""

    def close(self):
        if not self.closed:
            self._f.close()
        super().close()


class _ZstdReader(BufferedRaw):
    """zstd stream decompression that notices truncation.

    zstandard's stream_reader silently stops at a truncated frame, so frames are
    decoded with decompressobj (one per frame, for multi-frame files) and the
    last frame must have reached its end.
    """

    def __init__(self, src, name: str):
        super().__init__()
        self._src = src
        self._name = name
        self._dctx = zstandard.ZstdDecompressor()
        self._obj = self._dctx.decompressobj()
        self._fed = 0        # compressed bytes fed to the current frame's object
        self._total = 0

    def _feed(self, data: bytes) -> bytes:
        out = []
        while data:
            try:
                out.append(self._obj.decompress(data))
            except zstandard.ZstdError:
                raise errors.DecompressionError(f"file {self._name}: corrupt zstd data") from None
            self._fed += len(data)
            if self._obj.eof:
                data = self._obj.unused_data
                self._obj = self._dctx.decompressobj()
                self._fed = 0
            else:
                data = b""
        return b"".join(out)

    def _produce(self) -> bytes:
        while True:
            chunk = self._src.read(ZSTD_IN_CHUNK)
            if not chunk:
                if self._total == 0:
                    raise errors.DecompressionError(f"file {self._name}: empty zstd stream (no frame)")
                if self._fed:
                    raise errors.DecompressionError(
                        f"file {self._name}: zstd stream is truncated (ends inside a frame)")
                return b""
            self._total += len(chunk)
            out = self._feed(chunk)
            if out:
                return out

    def close(self):
        if not self.closed:
            self._src.close()
        super().close()


class _GzipReader(io.RawIOBase):
    """gzip.GzipFile with its exceptions turned into DecompressionError."""

    def __init__(self, src: io.BufferedReader, name: str):
        super().__init__()
        self._src = src
        self._name = name
        if not src.peek(1):
            raise errors.DecompressionError(f"file {name}: empty gzip stream")
        self._gz = gzip.GzipFile(fileobj=src, mode="rb")

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        try:
            return self._gz.readinto(b)
        except EOFError:
            raise errors.DecompressionError(f"file {self._name}: gzip stream is truncated") from None
        except (gzip.BadGzipFile, zlib.error):
            raise errors.DecompressionError(f"file {self._name}: corrupt gzip data") from None

    def close(self):
        if not self.closed:
            self._gz.close()
            self._src.close()
        super().close()


def _read_exact(f, n: int) -> bytes:
    parts, got = [], 0
    while got < n:
        b = f.read(n - got)
        if not b:
            break
        parts.append(b)
        got += len(b)
    return b"".join(parts)


def open_plaintext(path: str, key: Optional[bytes], params: FileParams) -> io.BufferedIOBase:
    """Decrypt + decompress as a stream (the caller closes it)."""
    name = os.path.basename(path)
    enc = Encryption(params.encryption)
    comp = Compression(params.compression)
    if enc == Encryption.AES:
        if key is None:
            raise errors.MissingKey(f"file {name}: the batch is AES-encrypted but no key was given for it")
        if not isinstance(key, (bytes, bytearray)) or len(key) != 32:
            raise errors.DecryptionError(f"file {name}: the AES key must be 32 bytes (AES-256)")
    try:
        f = open(path, "rb", buffering=0)
    except OSError as exc:
        reason = {errno.ENOENT: "does not exist", errno.EISDIR: "is a directory", errno.EACCES: "is not readable"}.get(
            exc.errno, "cannot be opened")
        raise errors.BatchFileError(f"batch file {name} {reason}") from None
    try:
        raw: io.RawIOBase = _AesCbcReader(f, bytes(key), name) if enc == Encryption.AES else f
        src = io.BufferedReader(raw, CHUNK)
        if comp == Compression.OFF:
            return src
        if comp == Compression.ZSTD:
            dec: io.RawIOBase = _ZstdReader(src, name)
        else:
            dec = _GzipReader(src, name)
        return io.BufferedReader(dec, CHUNK)
    except BaseException:
        f.close()
        raise
