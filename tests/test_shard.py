"""Tests of :func:`jaxdia.shard` on one device: argument checks, the 1-device mesh, pytree
and copies, Jacobi.

The checks that need several devices are in ``tests/sharded/``, which runs in a pytest
process of its own on 8 fake CPU devices (JAX fixes the device count when it starts;
this process keeps one device for the rest of the suite).
"""

import copy

import jax
import numpy as np
import pytest
import scipy.sparse as sp

import jaxdia


@pytest.fixture
def mesh():
    return jax.make_mesh((1,), ("rows",))


def test_one_device_matches_scipy(mesh):
    S = sp.diags_array([1.0, -2.0, 3.0], offsets=[-2, 0, 1], shape=(7, 7))
    A = jaxdia.DiaMatrix.from_scipy(S)
    sharded = jaxdia.shard(A, mesh, "rows")
    assert sharded.halo == (2, 1) and sharded.padded_size == 7 and sharded.shards == 1
    x = np.arange(7.0)
    np.testing.assert_allclose(sharded.unshard_vector(sharded @ sharded.shard_vector(x)), S @ x)
    assert "halo=(2, 1)" in repr(sharded)


def test_pytree_roundtrip(mesh):
    sharded = jaxdia.shard(jaxdia.eye(4), mesh, "rows")
    leaves, tree = jax.tree_util.tree_flatten(sharded)
    assert len(leaves) == 1
    again = jax.tree_util.tree_unflatten(tree, leaves)
    assert again.offsets == sharded.offsets and again.mesh == sharded.mesh


def test_copy_and_deepcopy(mesh):
    sharded = jaxdia.shard(jaxdia.eye(4), mesh, "rows")
    for again in (copy.copy(sharded), copy.deepcopy(sharded)):
        assert (again.offsets, again.shape, again.axis) == (sharded.offsets, (4, 4), "rows")
        np.testing.assert_array_equal(again.windows, sharded.windows)


def test_rejects_bad_arguments(mesh):
    square = jaxdia.eye(4)
    with pytest.raises(TypeError, match="shard: A must be a jaxdia.DiaMatrix"):
        jaxdia.shard(np.eye(4), mesh, "rows")
    with pytest.raises(TypeError, match="jax.sharding.Mesh"):
        jaxdia.shard(square, "rows", "rows")
    with pytest.raises(ValueError, match=r"axis must be one of .*'cols'"):
        jaxdia.shard(square, mesh, "cols")
    with pytest.raises(ValueError, match=r"square matrices.*\(3, 4\)"):
        jaxdia.shard(jaxdia.DiaMatrix(np.ones((1, 4)), 0, (3, 4)), mesh, "rows")
    with pytest.raises(ValueError, match=r"batch shape \(2,\)"):
        jaxdia.shard(jaxdia.DiaMatrix(np.ones((2, 1, 4)), 0, (4, 4)), mesh, "rows")


def test_rejects_bad_vectors():
    mesh = jax.make_mesh((1,), ("rows",))
    sharded = jaxdia.shard(jaxdia.eye(4), mesh, "rows")
    with pytest.raises(ValueError, match=r"shape \(4,\) or a block \(4, c\), got shape \(5,\)"):
        sharded.shard_vector(np.ones(5))
    with pytest.raises(ValueError, match=r"vectors of shape \(4,\).*got shape \(3,\)"):
        sharded @ np.ones(3)
    with pytest.raises(ValueError, match=r"got shape \(4, 1, 1\)"):
        sharded @ np.ones((4, 1, 1))
    with pytest.raises(ValueError, match=r"unshard_vector expects .*got shape \(2,\)"):
        sharded.unshard_vector(np.ones(2))


def test_diagonal_and_jacobi(mesh):
    A = jaxdia.diags([1.0, -4.0, 2.0], offsets=[-1, 0, 1], shape=(5, 5))
    sharded = jaxdia.shard(A, mesh, "rows")
    np.testing.assert_array_equal(sharded.diagonal(), A.diagonal())
    v = np.arange(5.0)
    M = jaxdia.jacobi(sharded)
    np.testing.assert_allclose(M(sharded.shard_vector(v)), v / np.asarray(A.diagonal()))
    no_diagonal = jaxdia.shard(jaxdia.eye(4, k=1), mesh, "rows")
    np.testing.assert_array_equal(no_diagonal.diagonal(), np.zeros(4))
    with pytest.raises(ValueError, match="diagonal must be nonzero, but it is 0 at index 0"):
        jaxdia.jacobi(no_diagonal)


def test_jacobi_rejects_other_operands():
    with pytest.raises(TypeError, match="A must be a jaxdia.DiaMatrix, a ShardedDiaMatrix"):
        jaxdia.jacobi(np.eye(3))

    class Wide:
        shape = (2, 3)

        def __matmul__(self, x):
            return x

        def diagonal(self):
            return np.ones(2)

    with pytest.raises(ValueError, match=r"jacobi: A must be square, got shape \(2, 3\)"):
        jaxdia.jacobi(Wide())
