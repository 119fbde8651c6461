"""The build of jaxdia's C extension; everything else is in pyproject.toml.

``jaxdia._kernels._lapack_ffi`` (``jaxdia/_kernels/_lapack_ffi.c``) holds the XLA FFI
handlers of the LAPACK custom calls. It uses Python's limited API (3.11), so one wheel
(``cp311-abi3``) per platform serves every supported Python; it needs a C compiler and
Python's headers, nothing from jaxlib (the module's comment says why).
"""

from setuptools import Extension, setup
from setuptools.command.build_py import build_py


class BuildPy(build_py):
    """Leaves ``jaxdia/conftest.py`` (the doctests' pytest set-up) out of the wheel."""

    def find_package_modules(self, package, package_dir):
        modules = super().find_package_modules(package, package_dir)
        return [module for module in modules if module[:2] != ("jaxdia", "conftest")]


setup(
    ext_modules=[
        Extension(
            "jaxdia._kernels._lapack_ffi",
            ["jaxdia/_kernels/_lapack_ffi.c"],
            define_macros=[("Py_LIMITED_API", "0x030B0000")],
            py_limited_api=True,
        )
    ],
    cmdclass={"build_py": BuildPy},
    options={"bdist_wheel": {"py_limited_api": "cp311"}},
)
