"""Here to ship `safetyrepro_lm_eval.pth` (see safetyrepro/lm_eval_plugin.py) into site-packages, for
regular and editable installs alike, to list the packages under the folders that pyproject.toml's
package-dir maps into `safetyrepro` (so a new benchmark folder needs no edit), and to build outside the
checkout (build_base); everything else is in pyproject.toml."""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

from setuptools import find_packages, setup
from setuptools.command.build_py import build_py
from setuptools.command.editable_wheel import editable_wheel
from setuptools.config.pyprojecttoml import load_file

PTH = "safetyrepro_lm_eval.pth"
HERE = Path(__file__).resolve().parent
# import package -> folder: [tool.setuptools] package-dir in pyproject.toml, the one home of the mapping
ROOTS = load_file(HERE / "pyproject.toml")["tool"]["setuptools"]["package-dir"]


def packages() -> list[str]:
    """Every package under the mapped folders (a folder with an __init__.py)."""
    return sorted(
        {
            name
            for root, folder in ROOTS.items()
            for name in (root, *(f"{root}.{sub}" for sub in find_packages(str(HERE / folder))))
        }
    )


class build_py_with_pth(build_py):
    def run(self):
        super().run()
        self.copy_file(PTH, str(Path(self.build_lib) / PTH), preserve_mode=0)

    def get_outputs(self, include_bytecode=1):
        return [*super().get_outputs(include_bytecode), str(Path(self.build_lib) / PTH)]


class _StrategyWithPth:
    """Wraps setuptools' editable strategy so the editable wheel carries the hook too."""

    def __init__(self, inner):
        self.inner = inner

    def __call__(self, wheel, files, mapping):
        self.inner(wheel, files, mapping)
        wheel.writestr(PTH, Path(PTH).read_bytes())

    def __enter__(self):
        self.inner.__enter__()
        return self

    def __exit__(self, *exc):
        return self.inner.__exit__(*exc)


class editable_wheel_with_pth(editable_wheel):
    def _select_strategy(self, *args, **kwargs):
        return _StrategyWithPth(super()._select_strategy(*args, **kwargs))


def build_base() -> str:
    """Where `build` (and bdist_wheel under it) works: a temporary folder removed at exit, not
    ./build in the checkout (a build/lib copy of the task modules there made `inspect list tasks`,
    which scans the working folder, list every task twice). SAFETYREPRO_BUILD_DIR keeps one;
    `setup.py build --build-base DIR` still overrides both."""
    kept = os.environ.get("SAFETYREPRO_BUILD_DIR")
    if kept:
        return kept
    folder = tempfile.mkdtemp(prefix="safetyrepro-build-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


setup(
    packages=packages(),
    cmdclass={"build_py": build_py_with_pth, "editable_wheel": editable_wheel_with_pth},
    options={"build": {"build_base": build_base()}},
)
