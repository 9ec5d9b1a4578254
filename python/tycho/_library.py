"""Finding and loading libtycho.so, and the ctypes prototypes of abi/tycho/tycho.h.

libtycho is looked for, first found wins:

1. ``TYCHO_LIBRARY``: the path of ``libtycho.so`` (or ``libtycho.so.1``), taken as is;
2. the package's own: ``tycho/lib/libtycho.so.1`` beside this file, which a wheel built by
   ``pip install .`` from the repository root holds (with the command and the plugins);
3. the build tree: ``build/lib`` of the repository this package was installed from (recorded by
   ``pip install``), or, when the package is used straight from a checkout (``PYTHONPATH=python``),
   ``build/lib`` beside ``python/``;
4. the dynamic loader: ``libtycho.so.1`` through ``LD_LIBRARY_PATH`` and the ``ldconfig`` cache,
   which covers an installed prefix such as ``/usr/local``;
5. ``<sys.prefix>/lib`` and ``/usr/local/lib``.

libtycho then finds its plugins beside itself (``lib/tycho/plugins``) however it was loaded.
"""
from __future__ import annotations

import ctypes
import os
import pathlib
import sys
from typing import List, Optional, Tuple

from ._dlpack import DLManagedTensor

ABI_MAJOR = 1  # the TYCHO_ABI_VERSION_MAJOR these prototypes follow
SONAME = "libtycho.so.1"


class Progress(ctypes.Structure):
    """``tycho_progress``: one iteration's report to the progress callback."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("iteration", ctypes.c_int64),
        ("iterations_total", ctypes.c_int64),
        ("loss", ctypes.c_double),
        ("seconds", ctypes.c_double),
    ]


PROGRESS_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(Progress), ctypes.c_void_p)


class SessionOptions(ctypes.Structure):
    """``tycho_session_options`` (zero-initialised, ``struct_size`` set)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("base_dir", ctypes.c_char_p),
        ("overrides", ctypes.POINTER(ctypes.c_char_p)),
        ("n_overrides", ctypes.c_int64),
        ("communicator", ctypes.c_void_p),
    ]


class EvaluateOptions(ctypes.Structure):
    """``tycho_evaluate_options`` (zero-initialised, ``struct_size`` set; 0: the default)."""

    _fields_ = [
        ("struct_size", ctypes.c_uint32),
        ("sigma_A", ctypes.c_double),
        ("fov_fraction", ctypes.c_double),
        ("slice_thickness_A", ctypes.c_double),
    ]


def candidates() -> List[Tuple[str, str]]:
    """Where libtycho is looked for, in order: (how it was found, what is passed to dlopen)."""
    out: List[Tuple[str, str]] = []
    env = os.environ.get("TYCHO_LIBRARY")
    if env:
        out.append(("TYCHO_LIBRARY", env))
        return out  # an explicit choice: nothing else is tried
    bundled = pathlib.Path(__file__).resolve().parent / "lib" / SONAME
    out.append(("this package's own (a wheel built from the repository)", str(bundled)))
    try:
        from ._build_tree import BUILD_LIB_DIR  # written by setup.py at install
        out.append(("the build tree installed from", os.path.join(BUILD_LIB_DIR, "libtycho.so")))
    except ImportError:
        pass
    checkout = pathlib.Path(__file__).resolve().parent.parent.parent / "build" / "lib" / "libtycho.so"
    out.append(("the build tree of this checkout", str(checkout)))
    out.append(("the dynamic loader (LD_LIBRARY_PATH, ldconfig)", SONAME))
    for prefix in (sys.prefix, "/usr/local"):
        out.append((f"the prefix {prefix}", os.path.join(prefix, "lib", SONAME)))
    return out


def _declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Sets restype/argtypes of every function of tycho.h."""
    c = ctypes
    session_p = c.c_void_p
    table = {
        "tycho_abi_version": (c.c_uint32, []),
        "tycho_version": (c.c_char_p, []),
        "tycho_status_string": (c.c_char_p, [c.c_int]),
        "tycho_last_error": (c.c_char_p, []),
        "tycho_session_create": (c.c_int, [c.c_char_p, c.c_char_p, c.POINTER(session_p)]),
        "tycho_session_run": (c.c_int, [session_p, c.c_int64, PROGRESS_FN, c.c_void_p]),
        "tycho_session_get": (c.c_int, [session_p, c.c_char_p, c.POINTER(c.POINTER(DLManagedTensor))]),
        "tycho_session_save": (c.c_int, [session_p, c.c_char_p, c.c_int]),
        "tycho_session_destroy": (None, [session_p]),
        "tycho_session_create_ex": (c.c_int, [c.c_char_p, c.POINTER(SessionOptions), c.POINTER(session_p)]),
        "tycho_session_rank": (c.c_int32, [session_p]),
        "tycho_session_world_size": (c.c_int32, [session_p]),
        "tycho_session_barrier": (c.c_int, [session_p]),
        "tycho_shutdown": (None, []),
        # The JSON comes back as a tycho-owned char*: kept as a void pointer so that it can be freed.
        "tycho_evaluate": (c.c_int, [c.c_char_p, c.c_char_p, c.POINTER(EvaluateOptions), c.POINTER(c.c_void_p)]),
        "tycho_free_string": (None, [c.c_void_p]),
    }
    for name, (restype, argtypes) in table.items():
        fn = getattr(lib, name)
        fn.restype = restype
        fn.argtypes = argtypes
    return lib


_lib: Optional[ctypes.CDLL] = None
_lib_path: Optional[str] = None


def load() -> ctypes.CDLL:
    """libtycho, loaded once per process (see the module's docstring for the search order).

    Raises OSError naming every place tried when none holds a loadable libtycho, and
    ImportError when the library's ABI major differs from these bindings'.
    """
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    tried = []
    for how, path in candidates():
        if "/" in path and not os.path.exists(path):
            tried.append(f"{how}: {path} (does not exist)")
            continue
        try:
            lib = ctypes.CDLL(path)
        except OSError as e:
            tried.append(f"{how}: {path} ({e})")
            continue
        lib = _declare(lib)
        major = lib.tycho_abi_version() >> 16
        if major != ABI_MAJOR:
            raise ImportError(f"{path} has tycho ABI {major}.x; these bindings need {ABI_MAJOR}.x")
        _lib, _lib_path = lib, path
        return lib
    raise OSError("libtycho was not found; install the package with `pip install .` from the repository "
                  "(it builds libtycho into the package), set TYCHO_LIBRARY to the path of libtycho.so, or build "
                  "the repository (scripts/build) and reinstall this package. Tried:\n  " + "\n  ".join(tried))


def loaded_path() -> Optional[str]:
    """The path libtycho was loaded from (None before the first load())."""
    return _lib_path
