"""Functions of c2pa's native library that c2pa-python 0.38 does not wrap, bound with ``ctypes`` over c2pa-python's
own library and handles (its version is pinned in pyproject.toml for this reason)."""

from __future__ import annotations

import ctypes
from typing import Any

__all__ = ["Bytes", "bind", "take"]

Bytes = ctypes.POINTER(ctypes.c_ubyte)


def bind(name: str, argtypes: list[Any]) -> Any:
    """c2pa-python's internal module with native function ``name`` typed (``argtypes``, a signed size returned);
    None when the function or any internal this service leans on is missing."""
    try:
        from c2pa import c2pa as native

        function = getattr(native._lib, name)
        function.argtypes = argtypes
        function.restype = ctypes.c_int64
        native._check_ffi_operation_result  # noqa: B018 - present, or the caller's path is off
        if not hasattr(native.Builder, "_exclusive_native_call") or not hasattr(native.Signer, "_native_call"):
            return None
        return native
    except (ImportError, AttributeError, OSError, TypeError):
        return None


def take(native: Any, size: int, pointer: Any, what: str) -> bytes:
    """The ``size`` bytes c2pa returned at ``pointer``, which is then freed; c2pa's own error, prefixed by ``what``,
    when ``size`` says the call failed."""
    native._check_ffi_operation_result(size, f"{what}: {{}}", check=lambda r: r < 0)
    try:
        return ctypes.string_at(pointer, size)
    finally:
        native._lib.c2pa_free(pointer)
