"""The build of jaxdia's C extension; everything else is in pyproject.toml.

``jaxdia._kernels._lapack_ffi`` holds the XLA FFI handlers of the LAPACK custom calls; its
source is ``csrc/lapack_ffi/`` (``module.c`` there describes its files: each ``.c`` file is
one translation unit of the extension, and the headers and the template ``.inc`` are what
they include). It uses Python's limited API (3.11), so one wheel (``cp311-abi3``) per
platform serves every supported Python; it needs a C compiler and Python's headers,
nothing from jaxlib (``xla_ffi.h`` says why). The source lies outside the package: a folder
``jaxdia/_kernels/_lapack_ffi/`` would import as a namespace package in a checkout whose
extension is not built, instead of the ``ImportError`` that says how to build it
(``jaxdia/_kernels/lapack.py``).
"""

from glob import glob

from setuptools import Extension, setup
from setuptools.command.build_py import build_py

SOURCE = "csrc/lapack_ffi"


class BuildPy(build_py):
    """Leaves ``jaxdia/conftest.py`` (the doctests' pytest set-up) out of the wheel."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [module for module in modules if module[:2] != ("jaxdia", "conftest")]


setup(
    ext_modules=[
        Extension(
            "jaxdia._kernels._lapack_ffi",
            sorted(glob(f"{SOURCE}/*.c")),
            # Rebuilt when an included file changes, not only a .c file.
            depends=sorted(glob(f"{SOURCE}/*.h") + glob(f"{SOURCE}/*.inc")),
            define_macros=[("Py_LIMITED_API", "0x030B0000")],
            py_limited_api=True,
        )
    ],
    cmdclass={"build_py": BuildPy},
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
