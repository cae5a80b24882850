"""Functions of c2pa's native library that c2pa-python 0.38 does not wrap, bound with ``ctypes`` over c2pa-python's
own library and handles: the fast signing paths (``box_hashed``, ``data_hashed``).

They lean on c2pa-python's internals (``c2pa.c2pa._lib``, ``Builder._handle``, ``Signer._native_call``) and on the
native functions' C signatures, which a release may change without notice; a wrong signature would corrupt memory
rather than fail. So they are bound only under the exact c2pa-python and native library versions they were written
for (``PINNED``); under any other, or when anything they lean on is missing or fails, signing goes through
c2pa-python's public ``Builder.sign`` (about three times slower a signature), with one log line and a ``doctor``
warning (``fast_path_problem``).
"""

from __future__ import annotations

import ctypes
import functools
import logging
import threading
from typing import Any

__all__ = ["PINNED", "Bytes", "bind", "fast_path_problem", "take", "turn_off"]

log = logging.getLogger("imagesvc.provenance")

Bytes = ctypes.POINTER(ctypes.c_ubyte)
# (c2pa-python, its native c2pa library): the versions whose internals and C signatures the fast paths were checked
# against. Raising c2pa-python's pin in pyproject.toml means checking both again, then changing these.
PINNED = ("0.38.1", "0.91.3")

_lock = threading.Lock()
_off: list[str] = []  # why the fast paths were turned off in this process (the first reason), once they were


@functools.cache
def _version_problem() -> str | None:
    """Why the installed c2pa is not the one the fast paths were written for; None when it is."""
    try:
        import c2pa

        found = (str(c2pa.__version__), str(c2pa.sdk_version()))
    except Exception as exc:  # an import or a native call that fails: no fast path either
        return f"c2pa-python's version cannot be read ({type(exc).__name__}: {exc})"
    if found != PINNED:
        return (
            f"c2pa-python {found[0]} with native c2pa {found[1]} is installed; the fast paths were written for "
            f"c2pa-python {PINNED[0]} with native c2pa {PINNED[1]}"
        )
    return None


def turn_off(reason: str) -> None:
    """Turn the fast signing paths off for this process (logged once, with the first reason)."""
    with _lock:
        if _off:
            return
        _off.append(reason)
    log.warning("C2PA fast signing is off: %s; signing through c2pa-python's Builder.sign instead", reason)


def fast_path_problem() -> str | None:
    """Why the fast signing paths are off in this process; None while they are on."""
    if (problem := _version_problem()) is not None:
        turn_off(problem)
    return _off[0] if _off else None


def bind(name: str, argtypes: list[Any]) -> tuple[Any, Any] | None:
    """c2pa-python's internal module and its native function ``name``, typed (``argtypes``, a signed size
    returned) on a prototype of its own, so c2pa-python's own function objects are left as they are; None (and the
    fast paths off) under another c2pa version, or when the function or an internal the caller uses is missing."""
    if fast_path_problem() is not None:
        return None
    try:
        from c2pa import c2pa as native

        function = ctypes.CFUNCTYPE(ctypes.c_int64, *argtypes)((name, native._lib))
        for owner, attribute in (
            (native, "_check_ffi_operation_result"),
            (native._lib, "c2pa_free"),
            (native.Builder, "_exclusive_native_call"),
            (native.Signer, "_native_call"),
        ):
            getattr(owner, attribute)
        return native, function
    except Exception as exc:  # ImportError, AttributeError (a missing symbol or internal), OSError, TypeError
        turn_off(f"c2pa-python lacks what the fast path {name} uses ({type(exc).__name__}: {exc})")
        return None


def take(native: Any, size: int, pointer: Any, what: str) -> bytes:
    """The ``size`` bytes c2pa returned at ``pointer``, which is then freed; c2pa's own error, prefixed by ``what``,
    when ``size`` says the call failed."""
    native._check_ffi_operation_result(size, f"{what}: {{}}", check=lambda r: r < 0)
    try:
        return ctypes.string_at(pointer, size)
    finally:
        native._lib.c2pa_free(pointer)
