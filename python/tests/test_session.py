"""The Python package against the MoS2 example: the same object as the tycho command, bit for
bit; errors with tycho's status and the key named; progress counters; zero-copy arrays."""
import ctypes
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import tycho

ITERATIONS = 3  # as conftest.py's cli_result


@pytest.fixture(scope="module")
def session(mos2):
    # As `tycho reconstruct --iterations 3`: a run of 3 (its schedules span 3 iterations).
    with tycho.Session(mos2, overrides=[f"reconstruct.iterations={ITERATIONS}"]) as s:
        s.run(progress=False)  # the configured 3
        yield s


def test_object_is_the_commands_bit_for_bit(session, cli_result):
    expected = np.load(cli_result)["object"]
    obj = session.object
    assert obj.dtype == np.complex64 and obj.shape == expected.shape == (1, 220, 197)
    assert obj.tobytes() == expected.tobytes()
    assert not np.allclose(obj, 1)  # it did reconstruct something


def test_every_array_of_the_result(session, cli_result):
    saved = np.load(cli_result)
    for name in ("probe", "positions_px", "positions_A", "loss_history", "mask", "optimizer.object.m"):
        assert session.get(name).tobytes() == saved[name].tobytes(), name
    assert session.mask.shape == (96, 96) and session.mask.dtype == np.uint8 and session.mask.sum() == 96 * 96
    assert session.positions_px.shape == (32 * 24, 2) and session.positions_px.dtype == np.float64
    assert session.loss_history.shape == (ITERATIONS,)


def test_python_m_tycho_reconstruct_writes_the_commands_result(mos2, cli_result, tmp_path):
    out = tmp_path / "py.zip"
    done = subprocess.run([sys.executable, "-m", "tycho", "reconstruct", str(mos2), "--iterations", str(ITERATIONS),
                           "--output", str(out), "--quiet"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"wrote {out}\n"
    assert np.load(out)["object"].tobytes() == np.load(cli_result)["object"].tobytes()


def test_arrays_come_without_a_copy(session):
    t = session.tensor("object")
    a = np.from_dlpack(t)
    assert a.ctypes.data == t.data_ptr  # numpy's array is libtycho's memory
    assert t.__dlpack_device__() == (1, 0)  # kDLCPU
    with pytest.raises(BufferError):
        t.__dlpack__()  # handed over once
    unused = session.tensor("probe")  # never exported: freed by the wrapper, no leak or crash
    assert unused.shape == (1, 96, 96)
    unused.release()


def test_bad_config_raises_with_the_key_named(examples):
    with pytest.raises(tycho.InvalidArgumentError) as e:
        tycho.Session("[reconstruct]\nbatchsize = 3\n", base_dir=examples)
    assert e.value.status == 1 and e.value.status_name == "TYCHO_ERR_INVALID_ARGUMENT"
    assert "unknown key 'batchsize' in [reconstruct]; did you mean 'batch_size'?" in e.value.message
    with pytest.raises(tycho.InvalidArgumentError, match="iterations must be from 0 to 1000000000"):
        tycho.Session({"data": {"path": "data/mos2_80kV_32x24_counts.h5"}, "reconstruct": {"iterations": -1}},
                      base_dir=examples)
    with pytest.raises(tycho.NotFoundError, match="nope.h5"):
        tycho.Session({"data": {"path": "nope.h5"}}, base_dir=examples)
    with pytest.raises(FileNotFoundError, match="no-such.toml"):
        tycho.Session("no-such.toml")


def test_bad_config_file_is_named(tmp_path):
    path = tmp_path / "bad.toml"
    path.write_text("[reconstruct]\nbatchsize = 3\n")
    with pytest.raises(tycho.InvalidArgumentError) as e:
        tycho.Session(path)
    assert e.value.message.startswith(f"{path}: unknown key 'batchsize' in [reconstruct]; did you mean 'batch_size'?")
    assert str(e.value).startswith(f"TYCHO_ERR_INVALID_ARGUMENT: {path}: unknown key")


def test_progress_counters_continue_across_runs(examples):
    config = {"data": {"path": "data/mos2_80kV_32x24_counts.h5"}, "reconstruct": {"iterations": 2}}
    seen = []
    with tycho.Session.from_dict(config, base_dir=examples) as s:
        s.run(0, progress=seen.append)  # 0: the configured 2
        s.run(1, progress=seen.append)
        assert [(p.iteration, p.iterations_total) for p in seen] == [(1, 2), (2, 2), (3, 3)]
        assert [p.loss for p in seen] == s.loss_history.tolist()
        assert all(p.seconds > 0 for p in seen)
        # A callback returning False stops after that iteration and keeps it; no exception.
        s.run(10, progress=lambda p: p.iteration < 5)
        assert s.iterations_done == 5
        # An exception in the callback stops the run and comes out of run().
        def boom(p):
            raise KeyError("from the callback")
        with pytest.raises(KeyError, match="from the callback"):
            s.run(10, progress=boom)
        assert s.iterations_done == 6


def test_progress_bar_or_lines(examples, capsys, monkeypatch):
    config = "[data]\npath = 'data/mos2_80kV_32x24_counts.h5'\n[reconstruct]\niterations = 1\n"
    with tycho.Session.from_text(config, base_dir=examples) as s:
        monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # as if tqdm were not installed
        s.run(1, progress=True)
        assert capsys.readouterr().err.startswith("iteration    1/1  loss ")
        s.run(1)  # "auto" without tqdm: silent
        assert capsys.readouterr().err == ""
        monkeypatch.undo()
        pytest.importorskip("tqdm")
        s.run(1, progress=True)
        err = capsys.readouterr().err
        assert "tycho: 100%" in err and "1/1" in err and "loss=" in err


def test_save_refuses_to_replace_unless_asked(session, tmp_path):
    path = tmp_path / "r.zip"
    assert session.save(path) == path
    with pytest.raises(tycho.TychoIOError) as e:
        session.save(path)
    assert e.value.status == 3 and str(path) in e.value.message
    session.save(path, overwrite=True)
    assert np.load(path)["object"].tobytes() == session.object.tobytes()


def test_ranks_and_close(mos2):
    s = tycho.Session(mos2, overrides=["reconstruct.batch_size=64"])
    assert (s.rank, s.world_size) == (0, 1)
    s.barrier()
    with s:
        pass
    with pytest.raises(ValueError, match="closed"):
        s.object
    s.close()  # twice is fine


def test_version_and_library():
    assert tycho.version() == "0.1.0"
    assert tycho.abi_version() >> 16 == 1
    assert os.path.samefile(tycho.library_path(), os.environ.get("TYCHO_LIBRARY", tycho.library_path()))


def test_library_search_order(monkeypatch):
    from tycho import _library
    monkeypatch.setenv("TYCHO_LIBRARY", "/x/libtycho.so")
    assert _library.candidates() == [("TYCHO_LIBRARY", "/x/libtycho.so")]
    monkeypatch.delenv("TYCHO_LIBRARY")
    hows = [how for how, _ in _library.candidates()]
    assert hows.index("the build tree of this checkout") < hows.index("the dynamic loader (LD_LIBRARY_PATH, ldconfig)")
    # A wrong TYCHO_LIBRARY fails at import time with what was tried.
    env = dict(os.environ, TYCHO_LIBRARY="/nonexistent/libtycho.so")
    done = subprocess.run([sys.executable, "-c", "import tycho; tycho.version()"], env=env, capture_output=True,
                          text=True)
    assert done.returncode != 0 and "TYCHO_LIBRARY: /nonexistent/libtycho.so (does not exist)" in done.stderr


def test_held_out_loss(mos2, session):
    # [reconstruct] validation_fraction: a tenth of the patterns never enters a batch; their mean
    # loss after the run is the held-out loss.
    with tycho.Session(mos2, overrides=[f"reconstruct.iterations={ITERATIONS}", "reconstruct.validation_fraction=0.1",
                                        "reconstruct.positions.correct=false",
                                        "reconstruct.positions.refine_scan_map=false"]) as s:
        assert np.isnan(s.held_out_loss)  # before a run
        s.run(progress=False)
        loss = s.held_out_loss
        assert np.isfinite(loss) and loss > 0
        assert s.loss_history.shape == (ITERATIONS,)
    with pytest.raises(tycho.NotFoundError):
        session.held_out_loss  # none held out
