"""Signing through memory files that c2pa's native code reads and writes with libc's own functions.

c2pa-python hands the library Python callbacks for every read, write and seek of a stream (about ninety a signature
of a display tier), and each takes the GIL back from the event loop while a worker thread signs. Here the streams are
memory files (``memfd``) and the callbacks are libc's ``read``, ``write``, ``lseek`` and ``fsync`` themselves, with
the file descriptor as the stream's context, so the signature runs without the GIL apart from the ES256 callback.

This leans on c2pa-python's own stream and builder internals (pinned in pyproject.toml); where they, or ``memfd``,
are missing, ``AVAILABLE`` is False and callers sign through c2pa-python's public streams instead.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["AVAILABLE", "sign_in_memory_files"]


def _bind() -> tuple[Any, ...] | None:
    """c2pa's stream constructor and release, and libc's functions typed as its callbacks; None when any is missing."""
    try:
        from c2pa import c2pa as native

        libc = ctypes.CDLL(None, use_errno=True)

        def as_callback(prototype: Any, name: str) -> Any:
            return prototype(ctypes.cast(getattr(libc, name), ctypes.c_void_p).value)

        # c2pa's seek modes (start, current, end) are 0, 1, 2, as lseek's SEEK_SET, SEEK_CUR, SEEK_END.
        callbacks = (
            as_callback(native.ReadCallback, "read"),
            as_callback(native.SeekCallback, "lseek"),
            as_callback(native.WriteCallback, "write"),
            as_callback(native.FlushCallback, "fsync"),
        )
        create, release = native._lib.c2pa_create_stream, native._lib.c2pa_release_stream
        if not hasattr(native.Builder, "_sign_internal") or not hasattr(os, "memfd_create"):
            return None
        return native.StreamContext, create, release, callbacks
    except (ImportError, AttributeError, OSError, TypeError):
        return None


_BOUND = _bind()
AVAILABLE = _BOUND is not None


class _Stream:
    """A c2pa stream over an open file descriptor (``_stream`` is what c2pa-python's builder passes on)."""

    def __init__(self, fd: int) -> None:
        assert _BOUND is not None
        context_type, create, _, callbacks = _BOUND
        self._stream = create(ctypes.cast(ctypes.c_void_p(fd), ctypes.POINTER(context_type)), *callbacks)
        if not self._stream:
            raise OSError("c2pa could not open a stream over a memory file")

    def close(self) -> None:
        if self._stream and _BOUND is not None:
            _BOUND[2](self._stream)
            self._stream = None


@contextmanager
def _memory_file(data: bytes = b"") -> Iterator[int]:
    fd = os.memfd_create("imagesvc-c2pa", os.MFD_CLOEXEC)
    if fd == 0:  # descriptor 0 would be a null context: take another number
        fd, spare = os.dup(fd), fd
        os.close(spare)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.lseek(fd, 0, os.SEEK_SET)
        yield fd
    finally:
        os.close(fd)


def sign_in_memory_files(builder: Any, signer: Any, data: bytes, mime: str = "image/jpeg") -> bytes:
    """``data`` signed by ``builder`` with ``signer`` (raises what ``Builder.sign`` raises); the builder is used up."""
    with _memory_file(data) as source_fd, _memory_file() as dest_fd:
        source, dest = _Stream(source_fd), _Stream(dest_fd)
        try:
            builder._sign_internal(mime, source, dest, signer)
        finally:
            source.close()
            dest.close()
        return os.pread(dest_fd, os.lseek(dest_fd, 0, os.SEEK_END), 0)
