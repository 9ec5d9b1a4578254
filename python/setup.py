# Nothing is compiled: this only records, in the installed package, the build tree of the
# repository the package was installed from (tycho/_build_tree.py), so that `import tycho` finds
# that libtycho.so without TYCHO_LIBRARY. The rest of the metadata is in pyproject.toml.
import pathlib

from setuptools import setup
from setuptools.command.build_py import build_py


class build_py_recording_build_tree(build_py):
    def run(self):
        super().run()
        repo = pathlib.Path(__file__).resolve().parent.parent
        target = pathlib.Path(self.build_lib) / "tycho" / "_build_tree.py"
        target.write_text(
            "# Written by setup.py at install: the build tree of the repository installed from.\n"
            f"BUILD_LIB_DIR = {str(repo / 'build' / 'lib')!r}\n"
        )


setup(cmdclass={"build_py": build_py_recording_build_tree})
