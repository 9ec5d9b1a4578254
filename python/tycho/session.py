"""A reconstruction session over libtycho's C API (``abi/tycho/tycho.h``)."""
from __future__ import annotations

import ctypes
import os
import pathlib
import signal
import sys
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Optional, Union

import numpy as np

from . import _library
from ._dlpack import DLManagedTensor, Tensor
from .errors import OK, TychoError, error_for

SAVE_NEW = 0        # TYCHO_SAVE_NEW: refuse to replace an existing file
SAVE_OVERWRITE = 1  # TYCHO_SAVE_OVERWRITE

ConfigLike = Union[str, "os.PathLike[str]", Mapping[str, Any]]


@dataclass(frozen=True)
class ProgressInfo:
    """One iteration's report (``tycho_progress``).

    Attributes:
        iteration: 1-based, counted over the session's whole life (a second ``run`` continues).
        iterations_total: the iteration this ``run`` call ends at, counted the same way
            (``run(3)`` then ``run(2)``: 1/3, 2/3, 3/3, 4/5, 5/5).
        loss: mean loss per pattern of this iteration (dimensionless, the loss's units).
        seconds: wall time of this iteration, s.
    """

    iteration: int
    iterations_total: int
    loss: float
    seconds: float


ProgressCallback = Callable[[ProgressInfo], Optional[bool]]


def _check(status: int) -> None:
    if status != OK:
        lib = _library.load()
        raise error_for(status, lib.tycho_last_error().decode("utf-8", "replace"),
                        lib.tycho_status_string(status).decode())


def _toml_of_dict(config: Mapping[str, Any]) -> str:
    try:
        import tomli_w
    except ImportError as e:  # a dependency of the package; a bare checkout may lack it
        raise ImportError("a config given as a dict needs tomli-w (Debian: python3-tomli-w)") from e
    return tomli_w.dumps(dict(config))


class _TqdmReporter:
    """A tqdm bar over one run call (created at its first iteration, closed after the call)."""

    def __init__(self, tqdm: Any) -> None:
        self._tqdm, self._bar = tqdm, None

    def __call__(self, p: ProgressInfo) -> None:
        if self._bar is None:
            self._bar = self._tqdm(total=p.iterations_total - p.iteration + 1, unit="it", desc="tycho")
        self._bar.set_postfix(loss=f"{p.loss:.4e}", refresh=False)
        self._bar.update(1)

    def close(self) -> None:
        if self._bar is not None:
            self._bar.close()


def _tqdm_reporter() -> Optional[ProgressCallback]:
    try:
        with warnings.catch_warnings():
            # In a notebook without ipywidgets tqdm.auto warns, then takes the text bar: the bar
            # a terminal shows, which a notebook shows as well.
            warnings.simplefilter("ignore")
            from tqdm.auto import tqdm
    except ImportError:
        return None
    return _TqdmReporter(tqdm)


class _Interrupts:
    """Ctrl-C (SIGINT; a notebook's "interrupt the kernel") during a run: recorded by a handler
    installed for the run's length, so that the progress callback stops the run after the
    iteration under way (libtycho keeps everything done) and ``run`` then raises
    KeyboardInterrupt. Python's own handler would raise inside the ctypes callback, where the
    exception can be swallowed ("Exception ignored on calling ctypes callback function") and the
    run goes on. Outside the main thread signals cannot be caught: nothing is installed."""

    def __init__(self) -> None:
        self.seen = False
        self._previous: Any = None

    def __enter__(self) -> "_Interrupts":
        if threading.current_thread() is threading.main_thread():
            try:
                self._previous = signal.signal(signal.SIGINT, self._record)
            except ValueError:  # not the main interpreter
                self._previous = None
        return self

    def _record(self, _signum: int, _frame: Any) -> None:
        self.seen = True

    def poll(self) -> bool:
        """Runs the handlers of signals received while libtycho computed; True once interrupted."""
        _PyErr_CheckSignals()
        return self.seen

    def __exit__(self, *exc: Any) -> None:
        if self._previous is not None:
            signal.signal(signal.SIGINT, self._previous)


def _PyErr_CheckSignals() -> None:
    # Python runs signal handlers between bytecodes only; the callback asks for them at once.
    if ctypes.pythonapi.PyErr_CheckSignals() != 0:
        raise KeyboardInterrupt


def _line_reporter(p: ProgressInfo) -> None:
    print(f"iteration {p.iteration:>4}/{p.iterations_total}  loss {p.loss:.6e}  {p.seconds:.3f} s/it",
          file=sys.stderr, flush=True)


class Session:
    """One reconstruction: a configuration, its data, the engine's state, the result.

    ``config`` is one of

    * a path (``pathlib.Path``, or a ``str`` naming an existing file): a TOML file; its relative
      input paths resolve against the file's folder, as for ``tycho reconstruct``;
    * a ``str`` of TOML text (it holds a newline or ``=``);
    * a ``dict`` of tables, ``{"data": {"path": ...}, "reconstruct": {"iterations": 10}}``.

    For text and dicts, relative input paths resolve against ``base_dir`` (default: the current
    folder). ``overrides`` are ``"key=value"`` strings applied in order, like ``--set``.

    Creating the session validates every key, reads the data and prepares the engine. Errors
    raise :class:`tycho.TychoError` (a subclass per status) with tycho's message, which names
    the file, key or array at fault. Use a session from one thread at a time. Free it with
    :meth:`close` or a ``with`` block (otherwise when it is garbage collected).
    """

    def __init__(self, config: ConfigLike, *, base_dir: Union[str, "os.PathLike[str]", None] = None,
                 overrides: Iterable[str] = ()) -> None:
        self._handle = ctypes.c_void_p()
        self._lib = _library.load()
        text, origin_dir, self._origin = self._config_text(config)
        if base_dir is None:
            base_dir = origin_dir
        items = [s.encode() for s in overrides]
        array = (ctypes.c_char_p * max(len(items), 1))(*items)
        options = _library.SessionOptions()
        options.struct_size = ctypes.sizeof(_library.SessionOptions)
        options.base_dir = os.fsencode(base_dir) if base_dir is not None else None
        options.overrides = ctypes.cast(array, ctypes.POINTER(ctypes.c_char_p))
        options.n_overrides = len(items)
        try:
            _check(self._lib.tycho_session_create_ex(text.encode(), ctypes.byref(options),
                                                     ctypes.byref(self._handle)))
        except TychoError as e:
            # libtycho saw text only: name the file the text came from.
            if self._origin is not None:
                e.message = e.message.replace("<config text>", self._origin)
                e.args = (f"{e.status_name}: {e.message}",)
            raise

    @staticmethod
    def _config_text(config: ConfigLike):
        """(TOML text, the folder relative input paths resolve against, the file's name)."""
        if isinstance(config, Mapping):
            return _toml_of_dict(config), None, None
        if isinstance(config, os.PathLike) or (isinstance(config, str) and "\n" not in config and "=" not in config):
            path = pathlib.Path(config)
            if not path.is_file():
                raise FileNotFoundError(f"config file '{path}' does not exist")
            return path.read_text(), str(path.resolve().parent), str(path)
        if isinstance(config, str):
            return config, None, None
        raise TypeError(f"config must be a path, TOML text or a dict, not {type(config).__name__}")

    @classmethod
    def from_file(cls, path: Union[str, "os.PathLike[str]"], **kwargs: Any) -> "Session":
        """A session from a TOML file (relative input paths resolve against its folder)."""
        return cls(pathlib.Path(path), **kwargs)

    @classmethod
    def from_text(cls, text: str, **kwargs: Any) -> "Session":
        """A session from TOML text (relative input paths resolve against ``base_dir``)."""
        return cls(text + "\n", **kwargs)  # a newline marks it as text, never a path

    @classmethod
    def from_dict(cls, config: Mapping[str, Any], **kwargs: Any) -> "Session":
        """A session from a dict of tables (relative input paths resolve against ``base_dir``)."""
        return cls(config, **kwargs)

    # ---- lifetime

    def close(self) -> None:
        """Frees the session (its engine, data and result). Further calls raise ValueError."""
        if getattr(self, "_handle", None) and self._handle.value:
            self._lib.tycho_session_destroy(self._handle)
            self._handle = ctypes.c_void_p()

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:
            pass

    def _h(self) -> ctypes.c_void_p:
        if not self._handle.value:
            raise ValueError("this tycho session was closed")
        return self._handle

    # ---- running

    def run(self, iterations: int = 0, progress: Union[str, bool, None, ProgressCallback] = "auto") -> "Session":
        """Runs ``iterations`` more iterations (epochs over all positions), a fixed count; 0: the
        configured ``[reconstruct] iterations``: N, or with ``"auto"`` (the default) until the
        stopping rule ends the run (the loss no longer falls by more than its noise; at most
        ``max_iterations``). Returns the session, so ``Session(c).run(3).object`` works.

        ``progress``: ``"auto"`` (default) shows a tqdm bar when tqdm is installed and nothing
        otherwise; ``True`` a tqdm bar, or one line per iteration on stderr without tqdm;
        ``False``/``None`` nothing; a callable gets a :class:`ProgressInfo` after each
        iteration and stops the run by returning ``False`` (the iterations done so far are
        kept; no exception). An exception raised by the callable stops the run and is re-raised.

        Ctrl-C (a notebook's interrupt) stops the run after the iteration under way and raises
        KeyboardInterrupt; the session keeps every iteration done, and ``run`` continues.
        """
        if progress == "auto":
            report = _tqdm_reporter()
        elif progress is True:
            report = _tqdm_reporter() or _line_reporter
        elif progress is False or progress is None:
            report = None
        elif callable(progress):
            report = progress
        else:
            raise TypeError("progress must be 'auto', True, False, None or a callable")
        raised: list = []

        # Installed even without a report: it is where Ctrl-C is noticed (after each iteration).
        @_library.PROGRESS_FN
        def on_progress(p, _user_data):
            try:
                if interrupts.poll():
                    return 1
                if report is None:
                    return 0
                c = p.contents
                go_on = report(ProgressInfo(c.iteration, c.iterations_total, c.loss, c.seconds))
            except BaseException as e:  # re-raised below, after libtycho returned
                raised.append(e)
                return 1
            return 1 if go_on is False else 0

        with _Interrupts() as interrupts:
            try:
                status = self._lib.tycho_session_run(self._h(), int(iterations), on_progress, None)
            finally:
                if isinstance(report, _TqdmReporter):
                    report.close()
        if raised:
            raise raised[0]
        if interrupts.seen:
            raise KeyboardInterrupt(f"tycho: interrupted after iteration {self.iterations_done}; the session keeps "
                                    "every iteration done: run() again continues from there")
        if status != 8:  # TYCHO_ERR_CANCELLED: the callback asked to stop
            _check(status)
        return self

    # ---- results

    def tensor(self, name: str) -> Tensor:
        """A result array as a DLPack-capable :class:`tycho.Tensor` (a copy owned by Python),
        for ``numpy.from_dlpack``, ``torch.from_dlpack`` and the like. Names as :meth:`get`."""
        out = ctypes.POINTER(DLManagedTensor)()
        _check(self._lib.tycho_session_get(self._h(), name.encode(), ctypes.byref(out)))
        return Tensor(out)

    def get(self, name: str) -> np.ndarray:
        """A copy of a result array as a numpy array (zero-copy from libtycho's tensor, DLPack).

        Names: ``"object"``, ``"probe"``, ``"positions_px"`` (or ``"positions"``),
        ``"positions_A"``, ``"loss_history"``, ``"mask"``, ``"optimizer.<object|probe>.<array>"``,
        and with ``[reconstruct] validation_fraction`` > 0 ``"held_out_loss"``
        (see the properties for shapes, dtypes and units). Another name raises
        :class:`tycho.NotFoundError` listing the available ones.
        """
        return np.from_dlpack(self.tensor(name))

    @property
    def object(self) -> np.ndarray:
        """(slices, H, W) complex64 (complex128 with ``precision = "float64"``): the complex
        transmission of each slice, pixel size ``object_pixel_A`` of the manifest (Å)."""
        return self.get("object")

    @property
    def probe(self) -> np.ndarray:
        """(modes, N0, N1), the object's dtype: the real-space probe, centred in its window."""
        return self.get("probe")

    @property
    def positions_px(self) -> np.ndarray:
        """(P, 2) float64: each pattern's probe centre in object pixels (row, column)."""
        return self.get("positions_px")

    @property
    def positions_A(self) -> np.ndarray:
        """(P, 2) float64: each pattern's probe centre in Å (axis 0, axis 1)."""
        return self.get("positions_A")

    @property
    def loss_history(self) -> np.ndarray:
        """(iterations,) float64: mean loss per pattern of each iteration run so far (over the
        patterns in the batches where ``[reconstruct] validation_fraction`` holds some out)."""
        return self.get("loss_history")

    @property
    def held_out_loss(self) -> float:
        """With ``[reconstruct] validation_fraction`` > 0: the held-out patterns' mean loss at the
        end of the last :meth:`run` (patterns that never stepped the object or probe; NaN before
        a run). Raises :class:`tycho.NotFoundError` where none are held out."""
        return float(self.get("held_out_loss")[0])

    @property
    def mask(self) -> np.ndarray:
        """(N0, N1) uint8: 1 where the loss used the detector pixel, centred order."""
        return self.get("mask")

    @property
    def iterations_done(self) -> int:
        """Iterations run so far by this session."""
        return int(self.tensor("loss_history").shape[0])

    def save(self, path: Union[str, "os.PathLike[str]"], overwrite: bool = False) -> pathlib.Path:
        """Saves the result (arrays + manifest with the resolved config, the file the ``tycho``
        command writes) atomically. ``path`` is relative to the current folder; its folder must
        exist. Without ``overwrite`` an existing file raises :class:`tycho.TychoIOError`."""
        _check(self._lib.tycho_session_save(self._h(), os.fsencode(path), SAVE_OVERWRITE if overwrite else SAVE_NEW))
        return pathlib.Path(path)

    # ---- several ranks

    @property
    def rank(self) -> int:
        """This session's rank in [0, world_size) (0 without a launcher such as mpirun)."""
        return int(self._lib.tycho_session_rank(self._h()))

    @property
    def world_size(self) -> int:
        """The number of ranks (1 without a launcher)."""
        return int(self._lib.tycho_session_world_size(self._h()))

    def barrier(self) -> None:
        """Returns when every rank's session has called it."""
        _check(self._lib.tycho_session_barrier(self._h()))


def reconstruct(config: Union[str, "os.PathLike[str]"], *, iterations: int = 0,
                output: Union[str, "os.PathLike[str]", None] = None, overrides: Iterable[str] = (),
                progress: Union[str, bool, None, ProgressCallback] = "auto") -> Optional[pathlib.Path]:
    """The ``tycho reconstruct CONFIG`` main job: runs the configured iterations (a count, or by
    default until the stopping rule ends the run), or ``iterations`` (which, as ``--iterations``
    does, sets ``[reconstruct] iterations``: a fixed count, over which the learning-rate schedules
    are laid out), and saves the result to
    ``output`` (default: the config's ``[output] path``, else ``tycho-result.zip``, relative to
    the current folder), replacing it. The object is the ``tycho`` command's, bit for bit. Only
    rank 0 saves; returns the path written (None on other ranks). Writes no PNG previews.
    Interrupted (Ctrl-C), it saves the state after the last complete iteration to the same path,
    as the command does, and raises KeyboardInterrupt."""
    overrides = list(overrides)
    if iterations > 0:
        overrides.append(f"reconstruct.iterations={int(iterations)}")
    with Session(pathlib.Path(config), overrides=overrides) as s:
        path = pathlib.Path(output) if output is not None else _configured_output(pathlib.Path(config), overrides)
        try:
            s.run(0, progress=progress)
        except KeyboardInterrupt:
            # As the command: the state after the last complete iteration is saved, resumable.
            if s.rank == 0 and s.iterations_done > 0:
                s.save(path, overwrite=True)
                print(f"tycho: interrupted: saved the state after iteration {s.iterations_done} to '{path}'; "
                      f"continue with: tycho reconstruct CONFIG --from {path} -o NEW.zip", file=sys.stderr)
            raise
        if s.rank != 0:
            return None
        return s.save(path, overwrite=True)


def _configured_output(config: pathlib.Path, overrides: list) -> pathlib.Path:
    for o in reversed(overrides):
        key, _, value = o.partition("=")
        if key.strip() == "output.path":
            return pathlib.Path(value.strip().strip("'\""))
    try:
        import tomllib
    except ImportError:  # Python < 3.11
        import tomli as tomllib
    with open(config, "rb") as f:
        table = tomllib.load(f).get("output", {})
    return pathlib.Path(table.get("path", "tycho-result.zip"))


def version() -> str:
    """libtycho's release, e.g. ``"0.1.0"``."""
    return _library.load().tycho_version().decode()


def abi_version() -> int:
    """libtycho's ``TYCHO_ABI_VERSION``: ``(major << 16) | minor``."""
    return int(_library.load().tycho_abi_version())
