"""What to write instead of the ``scipy.sparse.dia_array`` attributes DiaMatrix lacks.

``DiaMatrix.__getattr__`` (reached only for names it does not have) adds the hint to its
AttributeError, so a SciPy port learns jaxdia's spelling where it fails.
"""

_TO_OTHER_FORMATS = "A.to_scipy() and SciPy's conversions, or A.to_bcoo() for JAX"

#: What to write instead of ``scipy.sparse.dia_array`` attributes that DiaMatrix lacks.
SCIPY_EQUIVALENTS = {
    "setdiag": "A.with_diagonal(values, k) (matrices are immutable: it returns a new one)",
    "copy": "A itself (matrices are immutable)",
    "todia": "A itself (a DiaMatrix is DIA), or A.to_scipy() for SciPy",
    "tocsr": _TO_OTHER_FORMATS,
    "tocsc": _TO_OTHER_FORMATS,
    "tocoo": _TO_OTHER_FORMATS,
    "tobsr": _TO_OTHER_FORMATS,
    "tolil": _TO_OTHER_FORMATS,
    "todok": _TO_OTHER_FORMATS,
    "asformat": _TO_OTHER_FORMATS,
    "getnnz": "A.nnz",
    "size": "A.nnz (SciPy's size counts the stored entries)",
    "A": "A.toarray()",
    "getH": "A.H",
    "format": "nothing: a DiaMatrix is always in DIA format",
    "getformat": "nothing: a DiaMatrix is always in DIA format",
    "get_shape": "A.shape",
    "set_shape": "nothing: matrices are immutable",
    "getmaxprint": "repr(A)",
    "asfptype": "A itself (a DiaMatrix is always floating)",
    "getrow": "A.todense()[i]",
    "getcol": "A @ e_j for the unit vector e_j, or A.todense()[:, j]",
    "nonzero": "A.to_scipy().nonzero() (index arrays of data-dependent length: host only)",
    "reshape": "A.to_scipy() (it changes the diagonal structure)",
    "resize": "A.to_scipy() (it changes the diagonal structure)",
    **{
        extremum: f"A2, B2 = jaxdia.align(A, B), then "
        f"jaxdia.DiaMatrix(jnp.{extremum}(A2.data, B2.data), A2.offsets, A2.shape)"
        for extremum in ("maximum", "minimum")
    },
    # SciPy's elementwise maps that keep 0 at 0
    **{
        ufunc: f"jaxdia.DiaMatrix(jnp.{ufunc}(A.data), A.offsets, A.shape)"
        for ufunc in (
            "sin",
            "sinh",
            "tan",
            "tanh",
            "arcsin",
            "arcsinh",
            "arctan",
            "arctanh",
            "sqrt",
            "expm1",
            "log1p",
            "deg2rad",
            "rad2deg",
            "sign",
            "rint",
            "floor",
            "ceil",
            "trunc",
        )
    },
}
