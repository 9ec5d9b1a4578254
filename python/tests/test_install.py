"""Where the package looks for libtycho and the tycho command: its own (a wheel's) first."""
import pathlib

import tycho
from tycho import _command, _library

PACKAGE = pathlib.Path(tycho.__file__).resolve().parent


def test_the_packages_own_library_is_looked_for_first(monkeypatch):
    monkeypatch.delenv("TYCHO_LIBRARY", raising=False)
    how, path = _library.candidates()[0]
    assert pathlib.Path(path) == PACKAGE / "lib" / "libtycho.so.1" and "own" in how
    # then the order of before: the build tree, the dynamic loader, the prefixes
    hows = [h for h, _ in _library.candidates()[1:]]
    assert hows[-3].startswith("the dynamic loader") and hows[-2].startswith("the prefix")


def test_tycho_library_is_still_an_explicit_choice(monkeypatch):
    monkeypatch.setenv("TYCHO_LIBRARY", "/some/libtycho.so")
    assert _library.candidates() == [("TYCHO_LIBRARY", "/some/libtycho.so")]


def test_the_command_says_when_this_install_has_none(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(_command, "BUNDLED", tmp_path / "bin" / "tycho")
    assert _command.main(["--version"]) == 127
    assert "has no bundled command" in capsys.readouterr().err
