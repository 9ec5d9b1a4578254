"""DLPack 0.6 structs (``<dlpack/dlpack.h>``) and a zero-copy hand-over of a tensor to numpy.

``tycho_session_get`` returns a ``DLManagedTensor*`` that the caller owns. :class:`Tensor` wraps
it and implements the DLPack protocol (``__dlpack__``, ``__dlpack_device__``), so
``numpy.from_dlpack(tensor)`` (numpy >= 1.22) makes an array over the same memory: numpy takes
the capsule, renames it ``used_dltensor`` and calls the tensor's deleter when the array is freed.
A tensor never handed over is freed by :class:`Tensor` itself.
"""
from __future__ import annotations

import ctypes
from typing import Any, Optional, Tuple


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int), ("device_id", ctypes.c_int)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", DLDevice),
        ("ndim", ctypes.c_int),
        ("dtype", DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class DLManagedTensor(ctypes.Structure):
    pass


DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [
    ("dl_tensor", DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", DELETER),
]

KDL_CPU = 1  # DLDeviceType kDLCPU

# The capsule name the DLPack protocol requires; PyCapsule_New keeps the pointer, so it lives
# as long as the module.
_CAPSULE_NAME = b"dltensor"
_capsule_new = ctypes.pythonapi.PyCapsule_New
_capsule_new.restype = ctypes.py_object
_capsule_new.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_capsule_is_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_is_valid.restype = ctypes.c_int
_capsule_is_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]


class Tensor:
    """Owns one ``DLManagedTensor*`` from libtycho until a DLPack consumer takes it.

    ``shape`` and ``dtype_code``/``bits`` describe it without touching the data; ``data_ptr``
    is the address of its first element (host memory).
    """

    def __init__(self, managed: "ctypes._Pointer[DLManagedTensor]") -> None:
        self._managed: Optional[ctypes._Pointer] = managed
        self._capsule: Any = None

    @property
    def shape(self) -> Tuple[int, ...]:
        t = self._managed.contents.dl_tensor
        return tuple(t.shape[i] for i in range(t.ndim))

    @property
    def data_ptr(self) -> int:
        t = self._managed.contents.dl_tensor
        return (t.data or 0) + t.byte_offset

    def __dlpack_device__(self) -> Tuple[int, int]:
        d = self._managed.contents.dl_tensor.device
        return (d.device_type, d.device_id)

    def __dlpack__(self, stream: Any = None, **_kwargs: Any) -> Any:
        """A ``dltensor`` capsule; may be taken once (ownership passes to the consumer)."""
        if self._capsule is not None or self._managed is None:
            raise BufferError("this tycho tensor was already exported through DLPack")
        if stream is not None and stream != -1:
            raise BufferError("tycho tensors live in host memory: no stream applies")
        self._capsule = _capsule_new(ctypes.cast(self._managed, ctypes.c_void_p), _CAPSULE_NAME, None)
        return self._capsule

    def release(self) -> None:
        """Frees the tensor now unless a consumer took it (then the consumer frees it)."""
        managed, self._managed = self._managed, None
        if managed is None:
            return
        taken = self._capsule is not None and not _capsule_is_valid(self._capsule, _CAPSULE_NAME)
        self._capsule = None
        if not taken:
            managed.contents.deleter(managed)

    def __del__(self) -> None:
        try:
            self.release()
        except Exception:  # interpreter shutdown: nothing sensible left to do
            pass
