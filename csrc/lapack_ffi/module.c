/* jaxdia._kernels._lapack_ffi: XLA FFI handlers that call LAPACK's banded routines.

   The handlers of jaxdia's LAPACK custom calls (jaxdia/_kernels/lapack.py documents the
   operations, layouts and attributes): ?gbtrf/?gbtrs (with ?tbsv for a factor computed
   without row interchanges; for a band with few subdiagonals, their algorithms written out
   instead, without BLAS calls; `gbsv`: both in one call, for a one-shot solve),
   ?pbtrf/?pbtrs (?pbtrf likewise written out for a narrow band), ?gttrf/?gttrs,
   ?pttrf/?pttrs, pbsinv (the band of the inverse from ?pbtrf's factor, written out), and
   gram_schmidt (gmres's orthogonalization of an Arnoldi vector by ?gemv). XLA calls them on
   its own threads with pointers to its buffers; they never touch Python or the GIL, and
   keep no state but the LAPACK function pointers set once by `targets` (so they are thread
   safe: LAPACK's routines are reentrant).

   LAPACK and BLAS are SciPy's: `targets` takes the capsules of
   `scipy.linalg.cython_lapack.__pyx_capi__` and `cython_blas.__pyx_capi__`, so the
   extension links against nothing but Python. XLA's FFI is declared in xla_ffi.h, a local
   copy of the part used (no jaxlib at build time).

   Errors: an unsupported dtype, a missing or ill-typed attribute, inconsistent shapes or
   an argument LAPACK rejects (info < 0: a bug, not bad input) become XLA errors (an
   XlaRuntimeError in Python). LAPACK's info > 0 (a zero pivot, a non-positive leading
   minor) is a result: the factorizations return it.

   The files, one concern each:
     module.c                      the Python module: `targets`, the handlers' registry
     xla_ffi.h                     XLA's FFI C API (the part used)
     lapack_ffi.h                  what the files below share (their declarations)
     lapack.c                      the table of LAPACK's and BLAS's routines
     call_frame.c                  reading a call frame, reporting errors, shared checks
     band_fill.c                   LAPACK's band arrays filled from DIA data
     band_routines.inc             the narrow-band LU, Cholesky and selected inverse
                                   written out: a template over one precision, compiled
                                   by band_routines_s.c, _d.c, _c.c and _z.c
     handlers_band.c               banded LU and Cholesky: gbtrf, gbtrs, gbsv, pbtrf, pbtrs
     handlers_tridiagonal.c        gttrf, gttrs, pttrf, pttrs
     handlers_selected_inverse.c   pbsinv
     handlers_gram_schmidt.c       gram_schmidt
   Each .c file is a translation unit of the one extension (setup.py compiles them all),
   rather than one file including the others: so only this file includes Python.h (the
   handlers cannot reach the Python API), and the template compiles once per precision in
   a unit of its own, its helpers under plain names. What crosses files is called a few
   times per handler call (once per system at most), never per element: the loops over a
   band stay within their file. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdio.h>

#include "lapack_ffi.h"

static const struct {
    const char *name;
    XLA_FFI_Handler *handler;
} HANDLERS[] = {
    {"gbtrf", gbtrf_handler}, {"gbtrs", gbtrs_handler}, {"gbsv", gbsv_handler},
    {"pbtrf", pbtrf_handler}, {"pbtrs", pbtrs_handler}, {"gttrf", gttrf_handler},
    {"gttrs", gttrs_handler}, {"pttrf", pttrf_handler}, {"pttrs", pttrs_handler},
    {"pbsinv", pbsinv_handler}, {"gram_schmidt", gram_schmidt_handler},
};

/* Reads every routine's function pointer from `capsules` (a mapping of names such as
   "dgbtrf" to SciPy's capsules) into lapack.c's table. */
static int read_routines(PyObject *capsules) {
    void *found[4][ROUTINES];
    for (int p = 0; p < 4; p++) {
        for (int r = 0; r < ROUTINES; r++) {
            char name[16];
            snprintf(name, sizeof name, "%c%s", PREFIXES[p], ROUTINE_NAMES[r]);
            PyObject *capsule = PyMapping_GetItemString(capsules, name);
            if (capsule == NULL) return -1;
            found[p][r] = PyCapsule_GetPointer(capsule, PyCapsule_GetName(capsule));
            Py_DECREF(capsule);
            if (found[p][r] == NULL) {
                if (!PyErr_Occurred())
                    PyErr_Format(PyExc_ValueError, "the capsule of %s holds no pointer", name);
                return -1;
            }
        }
    }
    if (set_routines(found) < 0) {
        PyErr_SetString(PyExc_RuntimeError,
                        "jaxdia's LAPACK handlers already use other LAPACK routines");
        return -1;
    }
    return 0;
}

static PyObject *targets(PyObject *module, PyObject *capsules) {
    (void)module;
    if (read_routines(capsules) < 0) return NULL;
    PyObject *result = PyDict_New();
    if (result == NULL) return NULL;
    for (size_t i = 0; i < sizeof HANDLERS / sizeof HANDLERS[0]; i++) {
        PyObject *capsule = PyCapsule_New((void *)HANDLERS[i].handler, NULL, NULL);
        if (capsule == NULL || PyDict_SetItemString(result, HANDLERS[i].name, capsule) < 0) {
            Py_XDECREF(capsule);
            Py_DECREF(result);
            return NULL;
        }
        Py_DECREF(capsule);
    }
    return result;
}

PyDoc_STRVAR(targets_doc,
             "targets(routines, /)\n--\n\n"
             "XLA FFI handlers of jaxdia's LAPACK custom calls, as ``{name: capsule}``\n"
             "(``gbtrf``, ``gbtrs``, ``gbsv``, ``pbtrf``, ``pbtrs``, ``gttrf``, ``gttrs``,\n"
             "``pttrf``, ``pttrs``, ``pbsinv``, ``gram_schmidt``), calling the routines of "
             "``routines``: a mapping of\n"
             "LAPACK/BLAS names (``dgbtrf``, ``ztbsv``, ...) to SciPy's ``__pyx_capi__``\n"
             "capsules.");

static PyMethodDef METHODS[] = {
    {"targets", targets, METH_O, targets_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT,
    .m_name = "jaxdia._kernels._lapack_ffi",
    .m_doc = "XLA FFI handlers that call SciPy's LAPACK (csrc/lapack_ffi/).",
    .m_size = 0,
    .m_methods = METHODS,
};

PyMODINIT_FUNC PyInit__lapack_ffi(void) { return PyModuleDef_Init(&MODULE); }
