"""Builds fedcore._native with the project's CMake (see pyproject.toml) and ships it in the
package: the bindings are the C++ client library, not a Python reimplementation."""

import glob
import os
import shutil
import subprocess
import sys

from setuptools import Distribution, setup
from setuptools.command.build_py import build_py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)


class BuildWithCMake(build_py):
    def run(self):
        super().run()
        build = os.path.join(HERE, "build", "cmake")
        subprocess.run(["cmake", "-S", ROOT, "-B", build, "-G", "Ninja",
                        "-DFEDCORE_BUILD_TESTS=OFF", "-DFEDCORE_BUILD_BENCH=OFF",
                        "-DFEDCORE_PYTHON=ON", f"-DPython3_EXECUTABLE={sys.executable}",
                        f"-DFEDCORE_ARCH={os.environ.get('FEDCORE_ARCH', 'native')}"],
                       check=True)
        subprocess.run(["cmake", "--build", build, "--target", "fedcore_python_native"],
                       check=True)
        built = glob.glob(os.path.join(build, "python", "fedcore", "_native*.so"))
        if len(built) != 1:
            raise RuntimeError(f"expected one built extension, found {built}")
        target = os.path.join(self.build_lib, "fedcore")
        os.makedirs(target, exist_ok=True)
        shutil.copy2(built[0], target)


class BinaryDistribution(Distribution):
    def has_ext_modules(self):  # a platform wheel: it holds a compiled module
        return True


setup(cmdclass={"build_py": BuildWithCMake}, distclass=BinaryDistribution)
