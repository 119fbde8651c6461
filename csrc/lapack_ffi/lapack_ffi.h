/* What the extension's translation units share, one section per file that defines it
   (module.c describes the extension and its files). None of it is Python's: only module.c
   includes Python.h, so the handlers, which XLA runs on its own threads without the GIL,
   cannot reach the Python API. */

#ifndef JAXDIA_LAPACK_FFI_H
#define JAXDIA_LAPACK_FFI_H

#include <stddef.h>
#include <stdint.h>

#include "xla_ffi.h"

/* Every name declared below is the extension's own, hidden from its dynamic symbol table
   (only module.c's PyInit__lapack_ffi is exported): no other library's symbol of the same
   name can take its place, nor it theirs. */
#if defined(__GNUC__)
#pragma GCC visibility push(hidden)
#endif

/* -- LAPACK and BLAS, through SciPy's Cython exports (lapack.c) ------------------------- */

/* Fortran's calling convention: every argument a pointer, LAPACK's `int` C's `int`. */
typedef void gbtrf_t(int *, int *, int *, int *, void *, int *, int *, int *);
typedef void gbtrs_t(char *, int *, int *, int *, int *, void *, int *, int *, void *, int *,
                     int *);
typedef void tbsv_t(char *, char *, char *, int *, int *, void *, int *, void *, int *);
typedef void pbtrf_t(char *, int *, int *, void *, int *, int *);
typedef void pbtrs_t(char *, int *, int *, int *, void *, int *, void *, int *, int *);
typedef void gttrf_t(int *, void *, void *, void *, void *, int *, int *);
typedef void gttrs_t(char *, int *, int *, void *, void *, void *, void *, int *, void *, int *,
                     int *);
typedef void pttrf_t(int *, void *, void *, int *);
typedef void real_pttrs_t(int *, int *, void *, void *, void *, int *, int *);
typedef void complex_pttrs_t(char *, int *, int *, void *, void *, void *, int *, int *);
typedef void gemv_t(char *, int *, int *, void *, void *, int *, void *, int *, void *, void *,
                    int *);

enum { GBTRF, GBTRS, TBSV, PBTRF, PBTRS, GTTRF, GTTRS, PTTRF, PTTRS, GEMV, ROUTINES };
/* The routines' names without their precision's letter, and the letters (s, d, c, z). */
extern const char *const ROUTINE_NAMES[ROUTINES];
extern const char PREFIXES[4];
/* routines[precision][routine]: set once by set_routines, read-only after. */
extern void *routines[4][ROUTINES];

/* Sets `routines` to `found`, the first time: 0. Later, with the same routines: 0; with
   others: -1, and `routines` stays (handlers registered with XLA may be running). */
int set_routines(void *found[4][ROUTINES]);

/* The precision of an XLA dtype (0 to 3: s, d, c, z), or -1. */
static inline int precision(int dtype) {
    switch (dtype) {
    case F32: return 0;
    case F64: return 1;
    case C64: return 2;
    case C128: return 3;
    default: return -1;
    }
}

static const size_t ITEMSIZE[4] = {4, 8, 8, 16};
static const int REAL_DTYPE[4] = {F32, F64, F32, F64};

/* -- the call frame (call_frame.c) ------------------------------------------------------ */

#if defined(__GNUC__)
#define PRINTF_LIKE(string, first) __attribute__((format(printf, string, first)))
#else
#define PRINTF_LIKE(string, first)
#endif

typedef struct {
    char *data;
    int dtype;
    int64_t rank;
    const int64_t *dims;
} Buffer;

/* An XLA error of `code` with a printf-formatted message. */
XLA_FFI_Error *fail(const XLA_FFI_CallFrame *frame, int code, const char *format, ...)
    PRINTF_LIKE(3, 4);

/* The metadata query: XLA asks which API version the handler was written against. Whether
   it was one (answered: the handler returns at once). */
int answered_metadata(XLA_FFI_CallFrame *frame);

/* The `count` operands or results in `list` (`what`: "operands" or "results") as `out`. */
XLA_FFI_Error *buffers(const XLA_FFI_CallFrame *frame, const XLA_FFI_List *list,
                       const char *what, int64_t count, Buffer *out);

/* Integer attribute `name` (an int64 or int32 scalar). */
XLA_FFI_Error *attribute(const XLA_FFI_CallFrame *frame, const char *name, int64_t *value);

/* The product of dims[start:stop]. */
static inline int64_t product(const Buffer *buffer, int64_t start, int64_t stop) {
    int64_t result = 1;
    for (int64_t axis = start; axis < stop; axis++) result *= buffer->dims[axis];
    return result;
}

static inline int64_t size_of(const Buffer *buffer) { return product(buffer, 0, buffer->rank); }

/* The number of systems in the leading dims of `buffer` (all but the last `core`). */
static inline int64_t systems_of(const Buffer *buffer, int core) {
    return product(buffer, 0, buffer->rank - core);
}

/* Checks a buffer's dtype and that it has at least `core` dims. */
XLA_FFI_Error *expect(const XLA_FFI_CallFrame *frame, const char *routine, const char *name,
                      const Buffer *buffer, int dtype, int core);

/* The precision of a floating-point buffer, or an error. */
XLA_FFI_Error *floating(const XLA_FFI_CallFrame *frame, const char *routine,
                        const Buffer *buffer, int core, int *p);

/* A LAPACK integer argument, or an error if `value` does not fit in C's int. */
XLA_FFI_Error *lapack_int(const XLA_FFI_CallFrame *frame, const char *routine, int64_t value,
                          int *out);

/* An error for LAPACK's info < 0 (an argument it rejects: a bug, not bad input). */
XLA_FFI_Error *check_info(const XLA_FFI_CallFrame *frame, const char *routine, int info);

/* Attribute `trans` (0, 1, 2) as LAPACK's letter (N, T, C). */
XLA_FFI_Error *transpose_letter(const XLA_FFI_CallFrame *frame, const char *routine,
                                char *letter);

/* Copies `source` into `target` unless XLA already aliased them. */
void copy_into(const Buffer *source, const Buffer *target, size_t itemsize);

typedef struct {
    int64_t systems; /* LAPACK calls */
    int64_t columns; /* right-hand sides per call */
    int shared;      /* one factor for every call */
} Plan;

/* A solve of right-hand sides `x` (..., k, n) with a factor whose last `core` dims are one
   system's: a shared factor (no batch dims, or size 1) solves the whole batch as the columns
   of one system (they lie one after the other). */
XLA_FFI_Error *plan_solve(const XLA_FFI_CallFrame *frame, const char *routine,
                          const Buffer *factor, int core, const Buffer *x, int64_t n,
                          Plan *plan);

/* Returns the error of `call`, if any. */
#define TRY(call)                                                                              \
    do {                                                                                       \
        XLA_FFI_Error *error_ = (call);                                                        \
        if (error_ != NULL) return error_;                                                     \
    } while (0)

/* -- filling LAPACK's band arrays from DIA data (band_fill.c) --------------------------- */

/* Checks that DIA `data` (..., diagonals, n) of `dtype` and its `layout` fit bands of n
   columns of `ldab` elements. */
XLA_FFI_Error *check_placement(const XLA_FFI_CallFrame *frame, const char *routine,
                               const Buffer *data, const Buffer *layout, int dtype, int64_t n,
                               int64_t ldab);

/* Checks that DIA `data` (..., diagonals, n) and its `layout` fit the bands (..., n, ldab),
   and asks for huge pages for the bands. */
XLA_FFI_Error *prepare_bands(const XLA_FFI_CallFrame *frame, const char *routine,
                             const Buffer *data, const Buffer *layout, const Buffer *bands,
                             int p);

/* The LAPACK band arrays (n columns of `ldab` elements each, one after the other from
   `into`) of systems first to first + count - 1 of the DIA data checked by
   check_placement: diagonal k of offset placement[k][0] fills column placement[k][1] (none
   if negative) over the rows inside the matrix; the rest is 0. */
void fill_into(const Buffer *data, const Buffer *layout, char *into, int64_t n, int64_t ldab,
               int p, int64_t first, int64_t count);

/* fill_into the bands of those systems in `bands` (..., n, ldab). */
void fill_systems(const Buffer *data, const Buffer *layout, const Buffer *bands, int p,
                  int64_t first, int64_t count);

/* Every system's LAPACK band array in `bands` from DIA `data` (prepare_bands, then
   fill_systems). */
XLA_FFI_Error *fill_bands(const XLA_FFI_CallFrame *frame, const char *routine,
                          const Buffer *data, const Buffer *layout, const Buffer *bands, int p);

/* -- the narrow-band routines written out (band_routines.inc, per precision) ------------ */

/* Right-hand sides or factors worked on at once: their steps are independent, so the
   processor overlaps them (one system's steps wait on each other). */
#define LANES 4

/* ?gbtf2 on `systems` bands one after the other: pivots (0-based) and infos, per system. */
typedef void band_lu_t(int64_t systems, int64_t n, int64_t kl, int64_t ku, int64_t ldab,
                       void *bands, int32_t *pivots, int32_t *infos);
/* ?gbtrs with band_lu_t's factors, in place. */
typedef void band_solve_t(char trans, int64_t n, int64_t kl, int64_t ku, int64_t ldab,
                          const void *factors, int64_t factor_step, const int32_t *pivots,
                          int64_t pivot_step, void *solution, int64_t systems, int64_t columns);
/* ?pbtf2 on one band, in place: LAPACK's info. */
typedef int32_t band_cholesky_t(int64_t n, int64_t kd, int lower, void *bands);
/* The band of A^-1 from band_cholesky_t's (or ?pbtrf's) factor. */
typedef void band_selected_inverse_t(int64_t n, int64_t kd, int lower, const void *factor,
                                     void *inverse);

band_lu_t s_band_lu, d_band_lu, c_band_lu, z_band_lu;
band_solve_t s_band_solve, d_band_solve, c_band_solve, z_band_solve;
band_cholesky_t s_band_cholesky, d_band_cholesky, c_band_cholesky, z_band_cholesky;
band_selected_inverse_t s_band_selected_inverse, d_band_selected_inverse,
    c_band_selected_inverse, z_band_selected_inverse;

/* -- the handlers (handlers_*.c), registered by module.c -------------------------------- */

XLA_FFI_Handler gbtrf_handler, gbtrs_handler, gbsv_handler, pbtrf_handler, pbtrs_handler;
XLA_FFI_Handler gttrf_handler, gttrs_handler, pttrf_handler, pttrs_handler;
XLA_FFI_Handler pbsinv_handler;
XLA_FFI_Handler gram_schmidt_handler;

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
