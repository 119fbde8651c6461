"""Linear algebra with DIA matrices: direct, iterative and spectral solvers.

* :mod:`.banded` (array level) and :mod:`.factor` (the public functions and factor
  pytrees): banded LU and Cholesky, one-shot or factor once and solve many;
* :mod:`.krylov`: the CG and BiCGStab loops and the public solvers that report;
* :mod:`.precond` (the public preconditioners: Jacobi, Chebyshev, multigrid's face),
  :mod:`.smoothers` (polynomials in ``D^-1 A``) and :mod:`.multigrid_hierarchy` (hierarchies and
  V-cycles on structured grids);
* :mod:`.lanczos` (``eigsh``) and :mod:`.expm` (``expm_multiply``).
"""
