"""A short eigenproblem, the SciPy original: the 10 lowest levels of the quantum harmonic
oscillator ``-1/2 u'' + x^2/2 u`` on 2000 points, by shift-invert ``eigsh``."""

import numpy as np
import scipy.sparse as sp
import scipy.sparse.linalg as spla

n, half_width = 2000, 10.0
x = np.linspace(-half_width, half_width, n)
h = x[1] - x[0]
H = sp.diags_array(
    [np.full(n - 1, -0.5 / h**2), 1.0 / h**2 + x**2 / 2, np.full(n - 1, -0.5 / h**2)],
    offsets=[-1, 0, 1],
)
levels = spla.eigsh(H, k=10, sigma=0.0, return_eigenvectors=False)
print("levels", np.round(np.sort(levels), 6))
