"""Linear algebra with DIA matrices: direct, iterative and spectral solvers.

* :mod:`.banded` (array level), :mod:`.factor` (the factor pytrees and their public
  functions) and :mod:`.direct` (the one-call solves): banded LU and Cholesky, one-shot
  or factor once and solve many;
* :mod:`.krylov`: the CG and BiCGStab loops and the public solvers that report;
* :mod:`.jacobi`, :mod:`.chebyshev` and :mod:`.multigrid`: the public preconditioners,
  over :mod:`.smoothers` (polynomials in ``D^-1 A``), :mod:`.stencil` (the geometry of
  stencils on structured grids), :mod:`.multigrid_hierarchy` (hierarchies and V-cycles),
  :mod:`.sharded_multigrid` and :mod:`.deep_halo` (their sharded forms);
* :mod:`.ilu` (array level) and :mod:`.incomplete`: ILU(0) and IC(0);
* :mod:`.eigsh` (the public ``eigsh``), over :mod:`.eigsh_checks` (its operators sorted
  and checked, its errors), :mod:`.eigsh_modes` (ARPACK's modes, the dense path) and
  :mod:`.lanczos` (the thick-restart loop); :mod:`.expm` (``expm_multiply``).
"""
