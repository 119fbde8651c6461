"""PyAMG's start-here demo, the original: 2-D Poisson on a 500 x 500 grid, a smoothed
aggregation hierarchy, CG-accelerated solve to 1e-8. Prints the relative residual."""

import numpy as np
import pyamg

A = pyamg.gallery.poisson((500, 500), format="csr")
b = np.random.default_rng(0).standard_normal(A.shape[0])
ml = pyamg.smoothed_aggregation_solver(A)
x = ml.solve(b, tol=1e-8, accel="cg")
print(f"residual {np.linalg.norm(b - A @ x) / np.linalg.norm(b):.2e}")
