/* jaxdia._kernels._lapack_ffi: XLA FFI handlers that call LAPACK's banded routines.

   The handlers of jaxdia's LAPACK custom calls (jaxdia/_kernels/lapack.py documents the
   operations, layouts and attributes): ?gbtrf/?gbtrs (with ?tbsv for a factor computed
   without row interchanges; for a band with few subdiagonals, their algorithms written out
   here instead, without BLAS calls; `gbsv`: both in one call, for a one-shot solve),
   ?pbtrf/?pbtrs (?pbtrf likewise written out for a narrow band), ?gttrf/?gttrs,
   ?pttrf/?pttrs, pbsinv (the band of the inverse from ?pbtrf's factor, written out
   here), and gram_schmidt (gmres's orthogonalization of an Arnoldi vector by ?gemv). XLA
   calls them on its own threads with pointers to its buffers; they never touch
   Python or the GIL, and keep no state but the LAPACK function pointers set once by
   `targets` (so they are thread safe: LAPACK's routines are reentrant).

   LAPACK and BLAS are SciPy's: `targets` takes the capsules of
   `scipy.linalg.cython_lapack.__pyx_capi__` and `cython_blas.__pyx_capi__` (Fortran calling
   convention, every argument a pointer, LAPACK's `int` is C's `int`), so the extension
   links against nothing but Python.

   XLA's FFI: the structures below are the part of XLA's C API (xla/ffi/api/c_api.h) that
   the handlers use, declared here rather than included from jaxlib, so that building
   jaxdia needs a C compiler and Python's headers only (no jaxlib at build time). The C API
   is ABI-stable and versioned: a handler states the version it was written against (0.1)
   when XLA asks (the metadata extension), and XLA keeps serving that version.

   Errors: an unsupported dtype, a missing or ill-typed attribute, inconsistent shapes or
   an argument LAPACK rejects (info < 0: a bug, not bad input) become XLA errors (an
   XlaRuntimeError in Python). LAPACK's info > 0 (a zero pivot, a non-positive leading
   minor) is a result: the factorizations return it. */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

/* -- XLA's FFI C API, version 0.1 (the subset used) ------------------------------------- */

typedef struct XLA_FFI_Extension_Base {
    size_t struct_size;
    int type;
    struct XLA_FFI_Extension_Base *next;
} XLA_FFI_Extension_Base;

typedef struct {
    size_t struct_size;
    XLA_FFI_Extension_Base *extension_start;
    int major_version;
    int minor_version;
} XLA_FFI_Api_Version;

typedef struct XLA_FFI_Error XLA_FFI_Error; /* opaque */

typedef struct {
    size_t struct_size;
    XLA_FFI_Extension_Base *extension_start;
    const char *message;
    int errc;
} XLA_FFI_Error_Create_Args;

typedef struct {
    size_t struct_size;
    XLA_FFI_Extension_Base *extension_start;
    XLA_FFI_Api_Version api_version;
    const void *internal_api;
    XLA_FFI_Error *(*XLA_FFI_Error_Create)(XLA_FFI_Error_Create_Args *args);
    /* ... further functions, not used */
} XLA_FFI_Api;

typedef struct {
    size_t struct_size;
    XLA_FFI_Api_Version api_version;
    uint32_t traits;
    /* ... fields of later versions, left as XLA set them */
} XLA_FFI_Metadata;

typedef struct {
    XLA_FFI_Extension_Base extension_base;
    XLA_FFI_Metadata *metadata;
} XLA_FFI_Metadata_Extension;

typedef struct {
    size_t struct_size;
    XLA_FFI_Extension_Base *extension_start;
    int dtype;
    void *data;
    int64_t rank;
    int64_t *dims;
} XLA_FFI_Buffer;

typedef struct { /* XLA_FFI_Args and XLA_FFI_Rets */
    size_t struct_size;
    XLA_FFI_Extension_Base *extension_start;
    int64_t size;
    int *types;
    void **items;
} XLA_FFI_List;

typedef struct {
    const char *ptr;
    size_t len;
} XLA_FFI_ByteSpan;

typedef struct {
    int dtype;
    void *value;
} XLA_FFI_Scalar;

typedef struct {
    size_t struct_size;
    XLA_FFI_Extension_Base *extension_start;
    int64_t size;
    int *types;
    XLA_FFI_ByteSpan **names;
    void **attrs;
} XLA_FFI_Attrs;

typedef struct {
    size_t struct_size;
    XLA_FFI_Extension_Base *extension_start;
    const XLA_FFI_Api *api;
    void *ctx;
    int stage;
    XLA_FFI_List args;
    XLA_FFI_List rets;
    XLA_FFI_Attrs attrs;
    void *future;
} XLA_FFI_CallFrame;

enum {
    EXTENSION_METADATA = 1,
    STAGE_EXECUTE = 3,
    BUFFER = 1, /* XLA_FFI_ArgType_BUFFER, XLA_FFI_RetType_BUFFER */
    ATTRIBUTE_SCALAR = 3,
    ERROR_INVALID_ARGUMENT = 3,
    ERROR_RESOURCE_EXHAUSTED = 8,
    ERROR_UNIMPLEMENTED = 12,
    ERROR_INTERNAL = 13,
    /* XLA_FFI_DataType */
    S32 = 4,
    S64 = 5,
    F32 = 11,
    F64 = 12,
    C64 = 15,
    C128 = 18,
};

/* -- LAPACK and BLAS, through SciPy's Cython exports ---------------------------------- */

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
static const char *const ROUTINE_NAMES[ROUTINES] = {
    "gbtrf", "gbtrs", "tbsv", "pbtrf", "pbtrs", "gttrf", "gttrs", "pttrf", "pttrs", "gemv",
};
static const char PREFIXES[4] = {'s', 'd', 'c', 'z'};
/* routines[precision][routine]: set once by `targets`, read-only after. */
static void *routines[4][ROUTINES];

/* The precision of an XLA dtype (0 to 3: s, d, c, z), or -1. */
static int precision(int dtype) {
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

/* -- the call frame --------------------------------------------------------------------- */

static XLA_FFI_Error *fail(const XLA_FFI_CallFrame *frame, int code, const char *format, ...) {
    char message[256];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(message, sizeof message, format, arguments);
    va_end(arguments);
    XLA_FFI_Error_Create_Args args = {sizeof args, NULL, message, code};
    return frame->api->XLA_FFI_Error_Create(&args);
}

/* The metadata query: XLA asks which API version the handler was written against. */
static int answered_metadata(XLA_FFI_CallFrame *frame) {
    XLA_FFI_Extension_Base *extension = frame->extension_start;
    if (extension == NULL || extension->type != EXTENSION_METADATA) return 0;
    XLA_FFI_Metadata *metadata = ((XLA_FFI_Metadata_Extension *)extension)->metadata;
    XLA_FFI_Api_Version version = {sizeof version, NULL, 0, 1};
    metadata->api_version = version;
    metadata->traits = 0;
    return 1;
}

typedef struct {
    char *data;
    int dtype;
    int64_t rank;
    const int64_t *dims;
} Buffer;

static XLA_FFI_Error *buffers(const XLA_FFI_CallFrame *frame, const XLA_FFI_List *list,
                              const char *what, int64_t count, Buffer *out) {
    if (list->size != count)
        return fail(frame, ERROR_INVALID_ARGUMENT, "expected %lld %s, got %lld",
                    (long long)count, what, (long long)list->size);
    for (int64_t i = 0; i < count; i++) {
        if (list->types[i] != BUFFER)
            return fail(frame, ERROR_INVALID_ARGUMENT, "%s %lld is not a buffer", what,
                        (long long)i);
        const XLA_FFI_Buffer *buffer = list->items[i];
        out[i].data = buffer->data;
        out[i].dtype = buffer->dtype;
        out[i].rank = buffer->rank;
        out[i].dims = buffer->dims;
    }
    return NULL;
}

/* Integer attribute `name` (an int64 or int32 scalar). */
static XLA_FFI_Error *attribute(const XLA_FFI_CallFrame *frame, const char *name,
                                int64_t *value) {
    const XLA_FFI_Attrs *attrs = &frame->attrs;
    size_t length = strlen(name);
    for (int64_t i = 0; i < attrs->size; i++) {
        const XLA_FFI_ByteSpan *key = attrs->names[i];
        if (key->len != length || memcmp(key->ptr, name, length) != 0) continue;
        const XLA_FFI_Scalar *scalar = attrs->attrs[i];
        if (attrs->types[i] != ATTRIBUTE_SCALAR || (scalar->dtype != S64 && scalar->dtype != S32))
            return fail(frame, ERROR_INVALID_ARGUMENT,
                        "attribute %s: jaxdia's LAPACK handlers take integer scalars only", name);
        *value = scalar->dtype == S64 ? *(const int64_t *)scalar->value
                                      : *(const int32_t *)scalar->value;
        return NULL;
    }
    return fail(frame, ERROR_INVALID_ARGUMENT, "missing attribute %s", name);
}

/* The product of dims[start:stop]. */
static int64_t product(const Buffer *buffer, int64_t start, int64_t stop) {
    int64_t result = 1;
    for (int64_t axis = start; axis < stop; axis++) result *= buffer->dims[axis];
    return result;
}

static int64_t size_of(const Buffer *buffer) { return product(buffer, 0, buffer->rank); }

/* The number of systems in the leading dims of `buffer` (all but the last `core`). */
static int64_t systems_of(const Buffer *buffer, int core) {
    return product(buffer, 0, buffer->rank - core);
}

/* Checks a buffer's dtype and that it has at least `core` dims. */
static XLA_FFI_Error *expect(const XLA_FFI_CallFrame *frame, const char *routine,
                             const char *name, const Buffer *buffer, int dtype, int core) {
    if (buffer->dtype != dtype)
        return fail(frame, ERROR_UNIMPLEMENTED, "%s: %s has XLA dtype %d, expected %d", routine,
                    name, buffer->dtype, dtype);
    if (buffer->rank < core)
        return fail(frame, ERROR_INVALID_ARGUMENT, "%s: %s has rank %lld, expected >= %d",
                    routine, name, (long long)buffer->rank, core);
    return NULL;
}

/* The precision of a floating-point buffer, or an error. */
static XLA_FFI_Error *floating(const XLA_FFI_CallFrame *frame, const char *routine,
                               const Buffer *buffer, int core, int *p) {
    *p = precision(buffer->dtype);
    if (*p < 0)
        return fail(frame, ERROR_UNIMPLEMENTED,
                    "%s: XLA dtype %d is not float32, float64, complex64 or complex128", routine,
                    buffer->dtype);
    return expect(frame, routine, "the factor", buffer, buffer->dtype, core);
}

/* A LAPACK integer argument, or an error if `value` does not fit in C's int. */
static XLA_FFI_Error *lapack_int(const XLA_FFI_CallFrame *frame, const char *routine,
                                 int64_t value, int *out) {
    if (value < 0 || value > INT32_MAX)
        return fail(frame, ERROR_INVALID_ARGUMENT, "%s: %lld does not fit LAPACK's int",
                    routine, (long long)value);
    *out = (int)value;
    return NULL;
}

static XLA_FFI_Error *check_info(const XLA_FFI_CallFrame *frame, const char *routine,
                                 int info) {
    if (info < 0)
        return fail(frame, ERROR_INTERNAL, "%s: argument %d had an illegal value", routine,
                    -info);
    return NULL;
}

/* Copies `source` into `target` unless XLA already aliased them. */
static void copy_into(const Buffer *source, const Buffer *target, size_t itemsize) {
    size_t bytes = (size_t)size_of(target) * itemsize;
    if (source->data != target->data && bytes) memcpy(target->data, source->data, bytes);
}

#define TRY(call)                                                                              \
    do {                                                                                       \
        XLA_FFI_Error *error_ = (call);                                                        \
        if (error_ != NULL) return error_;                                                     \
    } while (0)

/* -- filling LAPACK's band array from DIA data ------------------------------------------ */

#define HUGE_PAGE ((size_t)2 << 20)

/* Asks the kernel to back a fresh buffer with transparent huge pages before its first
   write: XLA's buffers sit on 4 KiB pages, and the first write of a factor's band then
   spends most of its time in page faults (NumPy asks the same for its large arrays). A
   hint: where it is unavailable or refused, nothing changes. */
static void huge_pages(void *data, size_t bytes) {
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (bytes < 2 * HUGE_PAGE) return;
    uintptr_t address = (uintptr_t)data;
    uintptr_t start = (address + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    uintptr_t stop = (address + bytes) / HUGE_PAGE * HUGE_PAGE;
    if (stop > start) madvise((void *)start, stop - start, MADV_HUGEPAGE);
#else
    (void)data;
    (void)bytes;
#endif
}

typedef struct {
    uint64_t half[2];
} Complex128;

/* Entry i of an integer buffer of int32 or int64 (the placement is int32 when JAX runs
   with x64 off, whatever dtype lapack.py asks for). */
static int64_t entry(const Buffer *buffer, int64_t i) {
    return buffer->dtype == S64 ? ((const int64_t *)buffer->data)[i]
                                : ((const int32_t *)buffer->data)[i];
}

#define FILL_BANDS(TYPE)                                                                       \
    for (int64_t system = first; system < first + count; system++) {                          \
        TYPE *target = (TYPE *)into + (system - first) * n * ldab;                             \
        const TYPE *source = (const TYPE *)data->data + system * diagonals * n;                \
        for (int64_t k = 0; k < diagonals; k++) {                                              \
            int64_t offset = entry(layout, 2 * k), column = entry(layout, 2 * k + 1);          \
            if (column < 0) continue;                                                          \
            int64_t start = offset > 0 ? offset : 0, stop = offset < 0 ? n + offset : n;       \
            for (int64_t j = start; j < stop; j++) target[j * ldab + column] = source[k * n + j]; \
        }                                                                                      \
    }

/* Checks that DIA `data` (..., diagonals, n) of `dtype` and its `layout` fit bands of n
   columns of `ldab` elements. */
static XLA_FFI_Error *check_placement(const XLA_FFI_CallFrame *frame, const char *routine,
                                      const Buffer *data, const Buffer *layout, int dtype,
                                      int64_t n, int64_t ldab) {
    TRY(expect(frame, routine, "the DIA data", data, dtype, 2));
    if (layout->dtype != S32)
        TRY(expect(frame, routine, "the placement", layout, S64, 0));
    int64_t diagonals = data->dims[data->rank - 2];
    if (data->dims[data->rank - 1] != n || size_of(layout) != 2 * diagonals)
        return fail(frame, ERROR_INVALID_ARGUMENT, "%s: the DIA data does not match the band",
                    routine);
    for (int64_t k = 0; k < diagonals; k++)
        if (entry(layout, 2 * k + 1) >= ldab)
            return fail(frame, ERROR_INVALID_ARGUMENT, "%s: band column %lld out of range",
                        routine, (long long)entry(layout, 2 * k + 1));
    return NULL;
}

/* Checks that DIA `data` (..., diagonals, n) and its `layout` fit the bands (..., n, ldab),
   and asks for huge pages for the bands (see huge_pages). */
static XLA_FFI_Error *prepare_bands(const XLA_FFI_CallFrame *frame, const char *routine,
                                    const Buffer *data, const Buffer *layout,
                                    const Buffer *bands, int p) {
    int64_t n = bands->dims[bands->rank - 2], ldab = bands->dims[bands->rank - 1];
    TRY(check_placement(frame, routine, data, layout, bands->dtype, n, ldab));
    int64_t systems = systems_of(bands, 2);
    if (systems_of(data, 2) != systems)
        return fail(frame, ERROR_INVALID_ARGUMENT, "%s: the DIA data does not match the band",
                    routine);
    huge_pages(bands->data, (size_t)(systems * n * ldab) * ITEMSIZE[p]);
    return NULL;
}

/* The LAPACK band arrays (n columns of `ldab` elements each, one after the other from
   `into`) of systems first to first + count - 1 of the DIA data checked by
   check_placement: diagonal k of offset placement[k][0] fills column placement[k][1] (none
   if negative) over the rows inside the matrix; the rest is 0. */
static void fill_into(const Buffer *data, const Buffer *layout, char *into, int64_t n,
                      int64_t ldab, int p, int64_t first, int64_t count) {
    int64_t diagonals = data->dims[data->rank - 2];
    size_t bytes = (size_t)(count * n * ldab) * ITEMSIZE[p];
    if (bytes == 0) return;
    memset(into, 0, bytes);
    switch (ITEMSIZE[p]) {
    case 4: FILL_BANDS(uint32_t) break;
    case 8: FILL_BANDS(uint64_t) break;
    default: FILL_BANDS(Complex128) break;
    }
}

/* fill_into the bands of those systems in `bands` (..., n, ldab). */
static void fill_systems(const Buffer *data, const Buffer *layout, const Buffer *bands, int p,
                         int64_t first, int64_t count) {
    int64_t n = bands->dims[bands->rank - 2], ldab = bands->dims[bands->rank - 1];
    fill_into(data, layout, bands->data + (size_t)(first * n * ldab) * ITEMSIZE[p], n, ldab, p,
              first, count);
}

/* Every system's LAPACK band array in `bands` from DIA `data` (see fill_systems). */
static XLA_FFI_Error *fill_bands(const XLA_FFI_CallFrame *frame, const char *routine,
                                 const Buffer *data, const Buffer *layout, const Buffer *bands,
                                 int p) {
    TRY(prepare_bands(frame, routine, data, layout, bands, p));
    fill_systems(data, layout, bands, p, 0, systems_of(bands, 2));
    return NULL;
}

/* -- the solve plan --------------------------------------------------------------------- */

typedef struct {
    int64_t systems;   /* LAPACK calls */
    int64_t columns;   /* right-hand sides per call */
    int shared;        /* one factor for every call */
} Plan;

/* A solve of right-hand sides `x` (..., k, n) with a factor whose last `core` dims are one
   system's: a shared factor (no batch dims, or size 1) solves the whole batch as the columns
   of one system (they lie one after the other). */
static XLA_FFI_Error *plan_solve(const XLA_FFI_CallFrame *frame, const char *routine,
                                 const Buffer *factor, int core, const Buffer *x, int64_t n,
                                 Plan *plan) {
    if (x->rank < 2 || x->dims[x->rank - 1] != n)
        return fail(frame, ERROR_INVALID_ARGUMENT,
                    "%s: the right-hand sides do not match the factor", routine);
    int64_t k = x->dims[x->rank - 2], factors = systems_of(factor, core);
    plan->shared = factors <= 1;
    plan->systems = plan->shared ? 1 : systems_of(x, 2);
    plan->columns = plan->shared ? k * systems_of(x, 2) : k;
    if (!plan->shared && factors != plan->systems)
        return fail(frame, ERROR_INVALID_ARGUMENT,
                    "%s: %lld factors for %lld batches of right-hand sides", routine,
                    (long long)factors, (long long)plan->systems);
    return NULL;
}

/* -- banded LU of a narrow band, without BLAS ------------------------------------------- */

/* LAPACK's ?gbtrf factors a band of fewer than 32 subdiagonals with the unblocked ?gbtf2
   (its block size, 1 or 32, is then 1 or more than kl), which calls BLAS (i?amax, ?swap,
   ?scal, ?ger) once per column on vectors of kl + 1 elements or fewer; ?gbtrs calls ?ger or
   ?gemv and ?swap once per column, and ?tbsv. For a narrow band each call costs more than
   its arithmetic. The loops below are those routines' algorithms written out: the same band
   storage, the same pivots (i?amax's: the first largest |re| + |im|), the same `info`, the
   same operations (a multiplier is the product with the pivot's reciprocal, as ?gbtf2's
   ?scal makes it; the solve divides by U's diagonal, as ?tbsv does; a zero skips its
   updates, as in the reference BLAS). Results differ from LAPACK's by rounding only: BLAS
   kernels may fuse or reorder, the transposed solve subtracts L's terms one by one where
   ?gemv sums them first, complex division is Smith's. Each is written once, for the four
   precisions, by a macro over the element type and its arithmetic (the `s_`, `d_`, `c_`,
   `z_` functions). */

/* Their loops run 1 to kl + ku times: GCC's vectorized versions of them, with their checks
   of trip count and overlap, cost more than they save. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC push_options
#pragma GCC optimize("no-tree-loop-vectorize")
#endif

typedef struct {
    float re, im;
} ComplexFloat;

typedef struct {
    double re, im;
} ComplexDouble;

#define REAL_ARITHMETIC(P, T)                                                                  \
    static inline T P##_abs1(T a) { return a < 0 ? -a : a; }                                  \
    static inline int P##_nonzero(T a) { return a != 0; }                                     \
    static inline T P##_zero(void) { return 0; }                                               \
    static inline T P##_mul(T a, T b) { return a * b; }                                       \
    static inline T P##_minus_product(T a, T b, T c) { return a - b * c; }                    \
    static inline T P##_div(T a, T b) { return a / b; }                                       \
    static inline T P##_reciprocal(T a) { return 1 / a; }                                     \
    static inline T P##_conj(T a) { return a; }                                              \
    static inline T P##_real_part(T a) { return a; }                                          \
    static inline T P##_of_real(T a) { return a; }

/* |re| + |im| is i?amax's measure (LAPACK's ?cabs1); division is Smith's, as Fortran's. */
#define COMPLEX_ARITHMETIC(P, T, R)                                                            \
    static inline R P##_abs1(T a) {                                                             \
        return (a.re < 0 ? -a.re : a.re) + (a.im < 0 ? -a.im : a.im);                        \
    }                                                                                        \
    static inline int P##_nonzero(T a) { return a.re != 0 || a.im != 0; }                     \
    static inline T P##_zero(void) { T z = {0, 0}; return z; }                                 \
    static inline T P##_mul(T a, T b) {                                                        \
        T z = {a.re * b.re - a.im * b.im, a.re * b.im + a.im * b.re};                          \
        return z;                                                                              \
    }                                                                                          \
    static inline T P##_minus_product(T a, T b, T c) {                                         \
        T z = {a.re - (b.re * c.re - b.im * c.im), a.im - (b.re * c.im + b.im * c.re)};        \
        return z;                                                                              \
    }                                                                                          \
    static inline T P##_div(T a, T b) {                                                        \
        R br = b.re < 0 ? -b.re : b.re, bi = b.im < 0 ? -b.im : b.im;                          \
        T z;                                                                                   \
        if (br >= bi) {                                                                        \
            R ratio = b.im / b.re, d = b.re + b.im * ratio;                                    \
            z.re = (a.re + a.im * ratio) / d;                                                  \
            z.im = (a.im - a.re * ratio) / d;                                                  \
        } else {                                                                               \
            R ratio = b.re / b.im, d = b.im + b.re * ratio;                                    \
            z.re = (a.re * ratio + a.im) / d;                                                  \
            z.im = (a.im * ratio - a.re) / d;                                                  \
        }                                                                                      \
        return z;                                                                              \
    }                                                                                          \
    static inline T P##_reciprocal(T a) {                                                      \
        T one = {1, 0};                                                                        \
        return P##_div(one, a);                                                                \
    }                                                                                          \
    static inline T P##_conj(T a) {                                                            \
        T z = {a.re, -a.im};                                                                   \
        return z;                                                                              \
    }                                                                                          \
    static inline R P##_real_part(T a) { return a.re; }                                        \
    static inline T P##_of_real(R a) {                                                         \
        T z = {a, 0};                                                                          \
        return z;                                                                              \
    }

REAL_ARITHMETIC(s, float)
REAL_ARITHMETIC(d, double)
COMPLEX_ARITHMETIC(c, ComplexFloat, float)
COMPLEX_ARITHMETIC(z, ComplexDouble, double)

/* Right-hand sides or factors worked on at once: their steps are independent, so the
   processor overlaps them (one system's steps wait on each other). */
#define LANES 4

#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

/* The bands whose factorization is compiled with kl, ku and ldab constant, its loops over
   the band unrolled (a third fewer instructions; the solve gains nothing from it): the
   pentadiagonal and 7-diagonal bands in ?gbtrf's layout (ldab = 2 kl + ku + 1). */
#define CONSTANT_BANDS(CALL, ...)                                                              \
    if (kl == 2 && ku == 2 && ldab == 7)                                                       \
        CALL(__VA_ARGS__, 2, 2, 7);                                                            \
    else if (kl == 3 && ku == 3 && ldab == 10)                                                 \
        CALL(__VA_ARGS__, 3, 3, 10);                                                           \
    else                                                                                       \
        CALL(__VA_ARGS__, kl, ku, ldab)

#define BAND_LU(P, T, R)                                                                        \
    /* Column j of ?gbtf2 on one system's band `ab` (n columns of `ldab` elements, the matrix in   \
       rows kl to 2 kl + ku, the rows above it room for U's fill-in), in place: its 0-based        \
       pivot into pivots[j], the last column its updates reached so far in `last`, the first       \
       zero pivot (1-based, LAPACK's info) in `info`. Column j's diagonal is ab[j ldab + kv];      \
       one column right and one row up in the matrix is ldab - 1 elements on in the band. */       \
    static ALWAYS_INLINE void P##_lu_column(int64_t n, int64_t kl, int64_t ku, int64_t ldab,       \
                                            T *ab, int32_t *pivots, int64_t j, int64_t *last,      \
                                            int *info) {                                           \
        int64_t kv = kl + ku, step = ldab - 1;                                                     \
        T *column = ab + j * ldab + kv;                                                            \
        if (j + kv < n)                                                                            \
            for (int64_t i = 0; i < kl; i++) ab[(j + kv) * ldab + i] = P##_zero();                 \
        int64_t below = n - 1 - j < kl ? n - 1 - j : kl, pivot = 0;                                \
        R largest = P##_abs1(column[0]);                                                           \
        for (int64_t i = 1; i <= below; i++)                                                       \
            if (P##_abs1(column[i]) > largest) {                                                   \
                largest = P##_abs1(column[i]);                                                     \
                pivot = i;                                                                         \
            }                                                                                      \
        pivots[j] = (int32_t)(j + pivot);                                                          \
        if (!P##_nonzero(column[pivot])) {                                                         \
            if (*info == 0) *info = (int)(j + 1);                                                  \
            return;                                                                                \
        }                                                                                          \
        int64_t reach = j + ku + pivot < n - 1 ? j + ku + pivot : n - 1;                           \
        if (reach > *last) *last = reach;                                                          \
        if (pivot != 0)                                                                            \
            for (int64_t c = 0; c <= *last - j; c++) {                                             \
                T swapped = column[c * step];                                                      \
                column[c * step] = column[c * step + pivot];                                       \
                column[c * step + pivot] = swapped;                                                \
            }                                                                                      \
        if (below == 0) return;                                                                    \
        T reciprocal = P##_reciprocal(column[0]);                                                  \
        for (int64_t i = 1; i <= below; i++) column[i] = P##_mul(column[i], reciprocal);           \
        for (int64_t c = 1; c <= *last - j; c++) {                                                 \
            T *target = column + c * step, factor = target[0];                                     \
            if (!P##_nonzero(factor)) continue;                                                    \
            for (int64_t i = 1; i <= below; i++)                                                   \
                target[i] = P##_minus_product(target[i], column[i], factor);                       \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    /* ?gbtf2 on `systems` bands one after the other in `bands`, LANES at a time. */               \
    static ALWAYS_INLINE void P##_band_lu_of(void *bands, int32_t *pivots, int32_t *infos,         \
                                             int64_t systems, int64_t n, int64_t kl, int64_t ku,   \
                                             int64_t ldab) {                                       \
        int64_t kv = kl + ku;                                                                      \
        for (int64_t first = 0; first < systems; first += LANES) {                                 \
            int64_t lanes = systems - first < LANES ? systems - first : LANES, last[LANES];        \
            T *ab[LANES];                                                                          \
            int info[LANES];                                                                       \
            for (int64_t lane = 0; lane < lanes; lane++) {                                         \
                ab[lane] = (T *)bands + (first + lane) * n * ldab;                                 \
                last[lane] = 0;                                                                    \
                info[lane] = 0;                                                                    \
                for (int64_t j = ku + 1; j < (kv < n ? kv : n); j++)                               \
                    for (int64_t i = kv - j; i < kl; i++) ab[lane][j * ldab + i] = P##_zero();     \
            }                                                                                      \
            for (int64_t j = 0; j < n; j++)                                                        \
                for (int64_t lane = 0; lane < lanes; lane++)                                       \
                    P##_lu_column(n, kl, ku, ldab, ab[lane], pivots + (first + lane) * n, j,       \
                                  &last[lane], &info[lane]);                                       \
            for (int64_t lane = 0; lane < lanes; lane++) infos[first + lane] = info[lane];         \
        }                                                                                          \
    }                                                                                              \
                                                                                                   \
    static void P##_band_lu(int64_t systems, int64_t n, int64_t kl, int64_t ku, int64_t ldab,      \
                            void *bands, int32_t *pivots, int32_t *infos) {                        \
        CONSTANT_BANDS(P##_band_lu_of, bands, pivots, infos, systems, n);                          \
    }                                                                                              \
                                                                                                   \
    static inline void P##_swap(T *x, int64_t i, int64_t j) {                                      \
        T swapped = x[i];                                                                          \
        x[i] = x[j];                                                                               \
        x[j] = swapped;                                                                            \
    }                                                                                              \
                                                                                                   \
    /* The steps of ?gbtrs for one right-hand side x and row j: L's (row interchange, then         \
       the multipliers below the diagonal) and U's (`upper` superdiagonals), and those of the      \
       transposed (conjugated) systems. */                                                         \
    static inline void P##_solve_l(int64_t n, int64_t kl, const T *l, int64_t row, T *x,           \
                                   int64_t j) {                                                    \
        int64_t below = n - 1 - j < kl ? n - 1 - j : kl;                                           \
        if (row != j) P##_swap(x, row, j);                                                         \
        T t = x[j];                                                                                \
        if (!P##_nonzero(t)) return;                                                               \
        for (int64_t i = 1; i <= below; i++) x[j + i] = P##_minus_product(x[j + i], l[i], t);      \
    }                                                                                              \
                                                                                                   \
    static inline void P##_solve_u(int64_t upper, const T *u, T *x, int64_t j) {                   \
        if (!P##_nonzero(x[j])) return;                                                            \
        T t = x[j] = P##_div(x[j], u[0]); /* U[i, j] is u[i - j] */                                \
        for (int64_t i = j - 1; i >= 0 && i >= j - upper; i--)                                     \
            x[i] = P##_minus_product(x[i], t, u[i - j]);                                           \
    }                                                                                              \
                                                                                                   \
    static inline void P##_solve_ut(int64_t upper, int conjugate, const T *u, T *x, int64_t j) {   \
        T t = x[j];                                                                                \
        for (int64_t i = j - upper > 0 ? j - upper : 0; i < j; i++)                                \
            t = P##_minus_product(t, conjugate ? P##_conj(u[i - j]) : u[i - j], x[i]);             \
        x[j] = P##_div(t, conjugate ? P##_conj(u[0]) : u[0]);                                      \
    }                                                                                              \
                                                                                                   \
    static inline void P##_solve_lt(int64_t n, int64_t kl, int conjugate, const T *l, int64_t row, \
                                    T *x, int64_t j) {                                             \
        int64_t below = n - 1 - j < kl ? n - 1 - j : kl;                                           \
        T t = x[j];                                                                                \
        for (int64_t i = 1; i <= below; i++)                                                       \
            t = P##_minus_product(t, x[j + i], conjugate ? P##_conj(l[i]) : l[i]);                 \
        x[j] = t;                                                                                  \
        if (row != j) P##_swap(x, row, j);                                                         \
    }                                                                                              \
                                                                                                   \
    /* A x = b for one right-hand side and a factor without row interchanges (U has ku           \
       superdiagonals), kl and ku constant: P##_solve_l's and P##_solve_u's operations in their    \
       order, the rows a step updates kept in registers for the next step (in memory each step     \
       would wait for the store of the row the step before it updated). `ab` is column 0's         \
       diagonal; the last rows of each sweep, where the band is cut off, take the loops above.     \
       kl and ku are at most 3. */                                                                 \
    static ALWAYS_INLINE void P##_solve_window_of(int64_t n, const T *ab, T *x, int64_t kl,        \
                                                  int64_t ku, int64_t ldab) {                      \
        T w[4];                                                                                    \
        int64_t j = 0;                                                                             \
        if (kl > 0 && n > kl) {                                                                    \
            for (int64_t i = 0; i < kl; i++) w[i] = x[i];                                          \
            for (; j < n - kl; j++) { /* w[i] is row j + i */                                      \
                const T *l = ab + j * ldab;                                                        \
                w[kl] = x[j + kl];                                                                 \
                T t = w[0];                                                                        \
                if (P##_nonzero(t))                                                                \
                    for (int64_t i = 1; i <= kl; i++) w[i] = P##_minus_product(w[i], l[i], t);     \
                x[j] = t;                                                                          \
                for (int64_t i = 0; i < kl; i++) w[i] = w[i + 1];                                  \
            }                                                                                      \
            for (int64_t i = 0; i < kl; i++) x[j + i] = w[i];                                      \
        }                                                                                          \
        for (; kl > 0 && j < n - 1; j++) P##_solve_l(n, kl, ab + j * ldab, j, x, j);               \
        j = n - 1;                                                                                 \
        if (n > ku) {                                                                              \
            for (int64_t i = 0; i < ku; i++) w[i] = x[j - i];                                      \
            for (; j >= ku; j--) { /* w[i] is row j - i */                                         \
                const T *u = ab + j * ldab;                                                        \
                w[ku] = x[j - ku];                                                                 \
                if (P##_nonzero(w[0])) {                                                           \
                    T t = w[0] = P##_div(w[0], u[0]);                                              \
                    for (int64_t i = 1; i <= ku; i++) w[i] = P##_minus_product(w[i], t, u[-i]);    \
                }                                                                                  \
                x[j] = w[0];                                                                       \
                for (int64_t i = 0; i < ku; i++) w[i] = w[i + 1];                                  \
            }                                                                                      \
            for (int64_t i = 0; i < ku; i++) x[j - i] = w[i];                                      \
        }                                                                                          \
        for (; j >= 0; j--) P##_solve_u(ku, ab + j * ldab, x, j);                                  \
    }                                                                                              \
                                                                                                   \
    /* P##_solve_window_of for the bands it is compiled for: whether it solved. */                 \
    static int P##_solve_window(int64_t n, int64_t kl, int64_t ku, int64_t ldab, const T *ab,      \
                                T *x) {                                                            \
        if (kl == 2 && ku == 2 && ldab == 7)                                                       \
            P##_solve_window_of(n, ab, x, 2, 2, 7);                                                \
        else if (kl == 3 && ku == 3 && ldab == 10)                                                 \
            P##_solve_window_of(n, ab, x, 3, 3, 10);                                               \
        else                                                                                       \
            return 0;                                                                              \
        return 1;                                                                                  \
    }                                                                                              \
                                                                                                   \
    /* ?gbtrs for `systems` factors (`factor_step` elements apart, their pivots `pivot_step`       \
       apart; 0 for one shared factor) with `columns` right-hand sides of n elements each, one     \
       after the other in `solution`, in place, LANES right-hand sides at a time. U has            \
       kl + ku superdiagonals, or ku when no row was interchanged (the rows above are zero). */    \
    static void P##_band_solve(char trans, int64_t n, int64_t kl, int64_t ku, int64_t ldab,        \
                               const void *factors, int64_t factor_step, const int32_t *pivots,    \
                               int64_t pivot_step, void *solution, int64_t systems,                \
                               int64_t columns) {                                                  \
        int64_t kv = kl + ku, total = systems * columns;                                           \
        int conjugate = trans == 'C';                                                              \
        for (int64_t first = 0; first < total; first += LANES) {                                   \
            int64_t lanes = total - first < LANES ? total - first : LANES, upper[LANES];           \
            const T *ab[LANES];                                                                    \
            const int32_t *row[LANES];                                                             \
            T *x[LANES];                                                                           \
            for (int64_t lane = 0; lane < lanes; lane++) {                                         \
                int64_t system = (first + lane) / columns;                                         \
                ab[lane] = (const T *)factors + system * factor_step + kv;                         \
                row[lane] = pivots + system * pivot_step;                                          \
                x[lane] = (T *)solution + (first + lane) * n;                                      \
                upper[lane] = ku;                                                                  \
                for (int64_t j = 0; j < n; j++)                                                    \
                    if (row[lane][j] != j) upper[lane] = kv;                                       \
            }                                                                                      \
            if (trans == 'N') {                                                                    \
                if (lanes == 1 && upper[0] == ku &&                                                \
                    P##_solve_window(n, kl, ku, ldab, ab[0], x[0]))                                \
                    continue;                                                                      \
                for (int64_t j = 0; kl > 0 && j < n - 1; j++)                                      \
                    for (int64_t lane = 0; lane < lanes; lane++)                                   \
                        P##_solve_l(n, kl, ab[lane] + j * ldab, row[lane][j], x[lane], j);         \
                for (int64_t j = n - 1; j >= 0; j--)                                               \
                    for (int64_t lane = 0; lane < lanes; lane++)                                   \
                        P##_solve_u(upper[lane], ab[lane] + j * ldab, x[lane], j);                 \
            } else {                                                                               \
                for (int64_t j = 0; j < n; j++)                                                    \
                    for (int64_t lane = 0; lane < lanes; lane++)                                   \
                        P##_solve_ut(upper[lane], conjugate, ab[lane] + j * ldab, x[lane], j);     \
                for (int64_t j = n - 2; kl > 0 && j >= 0; j--)                                     \
                    for (int64_t lane = 0; lane < lanes; lane++)                                   \
                        P##_solve_lt(n, kl, conjugate, ab[lane] + j * ldab, row[lane][j], x[lane], \
                                     j);                                                           \
            }                                                                                      \
        }                                                                                          \
    }

BAND_LU(s, float, float)
BAND_LU(d, double, double)
BAND_LU(c, ComplexFloat, float)
BAND_LU(z, ComplexDouble, double)

/* ?pbtrf of a narrow band: ?pbtf2's algorithm (LAPACK's ?pbtrf uses it for kd below its
   block size, 32), which calls BLAS (?scal, ?syr/?her, ?lacgv) once per column on vectors
   of kd elements, written out. Column j: a_jj <= 0 stops with info = j + 1 (as ?pbtf2;
   the factor is then partial), else r_jj = sqrt(a_jj), the kn = min(kd, n - 1 - j)
   entries of row j of U (column j of L) beside it are scaled by 1 / r_jj, and the
   trailing kn x kn block loses their outer product (its diagonal kept real, as ?her). */
#define BAND_CHOLESKY(P, T, R, SQRT)                                                            \
    static int32_t P##_band_cholesky(int64_t n, int64_t kd, int lower, T *c) {                \
        int64_t ldab = kd + 1;                                                                \
        for (int64_t j = 0; j < n; j++) {                                                     \
            T *pivot = c + j * ldab + (lower ? 0 : kd);                                       \
            R ajj = P##_real_part(*pivot);                                                    \
            if (ajj <= 0) {                                                                   \
                *pivot = P##_of_real(ajj);                                                    \
                return (int32_t)(j + 1);                                                      \
            }                                                                                 \
            ajj = SQRT(ajj);                                                                  \
            *pivot = P##_of_real(ajj);                                                        \
            int64_t kn = kd < n - 1 - j ? kd : n - 1 - j;                                     \
            T scale = P##_of_real(1 / ajj);                                                   \
            /* x_p: U[j, j + p] (upper) or L[j + p, j] (lower), p = 1..kn */                  \
            for (int64_t q = 1; q <= kn; q++) {                                               \
                T *x = lower ? c + j * ldab + q : c + (j + q) * ldab + kd - q;                \
                *x = P##_mul(*x, scale);                                                      \
            }                                                                                 \
            for (int64_t q = 1; q <= kn; q++) {                                               \
                T xq = lower ? c[j * ldab + q] : c[(j + q) * ldab + kd - q];                  \
                for (int64_t r = lower ? q : 1; r <= (lower ? kn : q); r++) {                 \
                    T xr = lower ? c[j * ldab + r] : c[(j + r) * ldab + kd - r];              \
                    /* lower: A[j+r, j+q] -= x_r conj(x_q); upper: A[j+r, j+q] -=             \
                       conj(x_r) x_q (r <= q) */                                               \
                    T *a = lower ? c + (j + q) * ldab + r - q : c + (j + q) * ldab + kd + r - q; \
                    *a = lower ? P##_minus_product(*a, xr, P##_conj(xq))                      \
                               : P##_minus_product(*a, P##_conj(xr), xq);                     \
                    if (r == q) *a = P##_of_real(P##_real_part(*a));                          \
                }                                                                             \
            }                                                                                 \
        }                                                                                     \
        return 0;                                                                             \
    }

BAND_CHOLESKY(s, float, float, sqrtf)
BAND_CHOLESKY(d, double, double, sqrt)
BAND_CHOLESKY(c, ComplexFloat, float, sqrtf)
BAND_CHOLESKY(z, ComplexDouble, double, sqrt)

/* -- the selected inverse of a banded Cholesky factor ----------------------------------- */

/* Z = A^-1 on the band of A = R^H R (R = U of ?pbtrf's upper factor, or L^H of its lower
   one), by Takahashi's recurrences: R Z = R^-H, whose right side is lower triangular with
   diagonal 1 / r_ii, gives for j >= i

       Z[i, j] = (delta_ij / r_ii - sum_{k = i+1}^{i+kd} R[i, k] Z[k, j]) / r_ii,

   and every Z[k, j] it reads (|k - j| <= kd, k > i, Z[k, j] = conj(Z[j, k]) for k > j) is
   in rows below i, or in row i at a larger j: rows from the last up, each from its last
   column left. O(n kd^2), the same order of work as the factorization. `z` is written in
   `c`'s band storage (the triangle ?pbtrf factored), its slots outside the matrix zero. */
#define BAND_SELECTED_INVERSE(P, T)                                                             \
    static void P##_band_selected_inverse(int64_t n, int64_t kd, int lower, const T *c,       \
                                          T *z) {                                             \
        int64_t ldab = kd + 1;                                                                \
        memset(z, 0, (size_t)(n * ldab) * sizeof(T));                                          \
        for (int64_t i = n - 1; i >= 0; i--) {                                                \
            int64_t last = i + kd < n - 1 ? i + kd : n - 1;                                   \
            T pivot = lower ? c[i * ldab] : c[i * ldab + kd];                                 \
            for (int64_t j = last; j >= i; j--) {                                             \
                T sum = j == i ? P##_reciprocal(pivot) : P##_zero();                          \
                for (int64_t k = i + 1; k <= last; k++) {                                     \
                    T r = lower ? P##_conj(c[i * ldab + k - i]) : c[k * ldab + kd + i - k];   \
                    int64_t row = k <= j ? k : j, d = k <= j ? j - k : k - j;                 \
                    T value = lower ? P##_conj(z[row * ldab + d]) : z[(row + d) * ldab + kd - d]; \
                    sum = P##_minus_product(sum, r, k <= j ? value : P##_conj(value));        \
                }                                                                             \
                T result = P##_div(sum, pivot);                                               \
                if (lower)                                                                    \
                    z[i * ldab + j - i] = P##_conj(result);                                   \
                else                                                                          \
                    z[j * ldab + kd - (j - i)] = result;                                      \
            }                                                                                 \
        }                                                                                     \
    }

BAND_SELECTED_INVERSE(s, float)
BAND_SELECTED_INVERSE(d, double)
BAND_SELECTED_INVERSE(c, ComplexFloat)
BAND_SELECTED_INVERSE(z, ComplexDouble)

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC pop_options
#endif

/* The narrow routines, by precision. */
typedef void band_lu_t(int64_t, int64_t, int64_t, int64_t, int64_t, void *, int32_t *, int32_t *);
typedef void band_solve_t(char, int64_t, int64_t, int64_t, int64_t, const void *, int64_t,
                          const int32_t *, int64_t, void *, int64_t, int64_t);
static band_lu_t *const BAND_LU_ROUTINES[4] = {s_band_lu, d_band_lu, c_band_lu, z_band_lu};
static band_solve_t *const BAND_SOLVE_ROUTINES[4] = {s_band_solve, d_band_solve, c_band_solve,
                                                     z_band_solve};
typedef void band_selected_inverse_t(int64_t, int64_t, int, const void *, void *);
typedef int32_t band_cholesky_t(int64_t, int64_t, int, void *);
static band_cholesky_t *const BAND_CHOLESKY_ROUTINES[4] = {
    (band_cholesky_t *)s_band_cholesky,
    (band_cholesky_t *)d_band_cholesky,
    (band_cholesky_t *)c_band_cholesky,
    (band_cholesky_t *)z_band_cholesky,
};
static band_selected_inverse_t *const BAND_SELECTED_INVERSE_ROUTINES[4] = {
    (band_selected_inverse_t *)s_band_selected_inverse,
    (band_selected_inverse_t *)d_band_selected_inverse,
    (band_selected_inverse_t *)c_band_selected_inverse,
    (band_selected_inverse_t *)z_band_selected_inverse,
};

/* Bands with at most this many subdiagonals are factored and solved by the loops above,
   whatever ku (LAPACK's ?gbtrf factors them with ?gbtf2 too: it blocks only bands with kl at
   least its block size, 32); wider ones by LAPACK, whose BLAS kernels, vectorized over the
   kl + 1 rows of a column, take about as long from kl = 6 on and less from kl = 24. */
#define WRITTEN_OUT_KL 4

/* -- banded LU -------------------------------------------------------------------------- */

static XLA_FFI_Error *gbtrf_handler(XLA_FFI_CallFrame *frame) {
    if (answered_metadata(frame) || frame->stage != STAGE_EXECUTE) return NULL;
    Buffer args[2], rets[3];
    int64_t kl, ku;
    int p;
    TRY(buffers(frame, &frame->args, "operands", 2, args));
    TRY(buffers(frame, &frame->rets, "results", 3, rets));
    TRY(attribute(frame, "kl", &kl));
    TRY(attribute(frame, "ku", &ku));
    const Buffer *lu = &rets[0], *pivots = &rets[1], *info = &rets[2];
    TRY(floating(frame, "gbtrf", lu, 2, &p));
    TRY(expect(frame, "gbtrf", "the pivots", pivots, S32, 1));
    TRY(expect(frame, "gbtrf", "info", info, S32, 0));
    TRY(prepare_bands(frame, "gbtrf", &args[0], &args[1], lu, p));
    int64_t n = lu->dims[lu->rank - 2], ldab = lu->dims[lu->rank - 1];
    int64_t systems = systems_of(lu, 2);
    if (size_of(pivots) != systems * n || size_of(info) != systems)
        return fail(frame, ERROR_INVALID_ARGUMENT, "gbtrf: pivots or info of the wrong size");
    int32_t *infos = (int32_t *)info->data, *pivot = (int32_t *)pivots->data;
    if (n == 0) {
        for (int64_t system = 0; system < systems; system++) infos[system] = 0;
        return NULL;
    }
    int n_, kl_, ku_, ldab_;
    TRY(lapack_int(frame, "gbtrf", n, &n_));
    TRY(lapack_int(frame, "gbtrf", kl, &kl_));
    TRY(lapack_int(frame, "gbtrf", ku, &ku_));
    TRY(lapack_int(frame, "gbtrf", ldab, &ldab_));
    if (ldab < 2 * kl + ku + 1)
        return fail(frame, ERROR_INVALID_ARGUMENT, "gbtrf: the band has too few columns");
    gbtrf_t *routine = (gbtrf_t *)routines[p][GBTRF];
    size_t step = (size_t)(n * ldab) * ITEMSIZE[p];
    if (kl <= WRITTEN_OUT_KL) { /* each band factored as soon as it is filled, in cache */
        for (int64_t first = 0; first < systems; first += LANES) {
            int64_t count = systems - first < LANES ? systems - first : LANES;
            fill_systems(&args[0], &args[1], lu, p, first, count);
            BAND_LU_ROUTINES[p](count, n, kl, ku, ldab, lu->data + first * step, pivot + first * n,
                                infos + first);
        }
        return NULL;
    }
    fill_systems(&args[0], &args[1], lu, p, 0, systems);
    for (int64_t system = 0; system < systems; system++) {
        int status = 0;
        int32_t *row = pivot + system * n;
        routine(&n_, &n_, &kl_, &ku_, lu->data + system * step, &ldab_, row, &status);
        TRY(check_info(frame, "gbtrf", status));
        infos[system] = status;
        for (int64_t i = 0; i < n; i++) row[i] -= 1; /* SciPy's 0-based pivots */
    }
    return NULL;
}

/* From this many rows on, an LU factor computed without row interchanges is solved by two
   ?tbsv over the bands L and U really have (see gbtrs_handler); for fewer, the calls per
   right-hand side cost more than ?gbtrs saves. */
#define NARROW_FROM 256

/* A x = b (or the transposed systems) for an LU factor without interchanges: L is unit
   lower with kl subdiagonals (rows kl + ku on), U upper with ku superdiagonals (rows kl to
   kl + ku). */
static void tbsv_lu(int p, char trans, int n, int kl, int ku, int ldab, char *lu, char *x,
                    int64_t columns) {
    tbsv_t *tbsv = (tbsv_t *)routines[p][TBSV];
    size_t itemsize = ITEMSIZE[p];
    int one = 1;
    char lower = 'L', upper = 'U', unit = 'U', non_unit = 'N';
    for (int64_t column = 0; column < columns; column++) {
        char *address = x + (size_t)column * (size_t)n * itemsize;
        char *l_band = lu + (size_t)(kl + ku) * itemsize, *u_band = lu + (size_t)kl * itemsize;
        int kl_ = kl, ku_ = ku, n_ = n, ldab_ = ldab;
        if (trans == 'N') {
            tbsv(&lower, &trans, &unit, &n_, &kl_, l_band, &ldab_, address, &one);
            tbsv(&upper, &trans, &non_unit, &n_, &ku_, u_band, &ldab_, address, &one);
        } else { /* A^T = U^T L^T: U^T first */
            tbsv(&upper, &trans, &non_unit, &n_, &ku_, u_band, &ldab_, address, &one);
            tbsv(&lower, &trans, &unit, &n_, &kl_, l_band, &ldab_, address, &one);
        }
    }
}

static XLA_FFI_Error *transpose_letter(const XLA_FFI_CallFrame *frame, const char *routine,
                                       char *letter) {
    int64_t trans;
    TRY(attribute(frame, "trans", &trans));
    if (trans < 0 || trans > 2)
        return fail(frame, ERROR_INVALID_ARGUMENT, "%s: trans must be 0, 1 or 2, not %lld",
                    routine, (long long)trans);
    *letter = "NTC"[trans];
    return NULL;
}

/* ?gbtrs. A factor computed without row interchanges (a diagonally dominant matrix, say)
   has a U of bandwidth ku, not the kl + ku that ?gbtrs sweeps: then ?tbsv over L's and U's
   own bands does the work instead. A band of at most WRITTEN_OUT_KL subdiagonals takes the
   written-out solve, which sweeps U's ku superdiagonals only in that case itself. */
static XLA_FFI_Error *gbtrs_handler(XLA_FFI_CallFrame *frame) {
    if (answered_metadata(frame) || frame->stage != STAGE_EXECUTE) return NULL;
    Buffer args[3], rets[1];
    int64_t kl, ku;
    char trans;
    int p;
    TRY(buffers(frame, &frame->args, "operands", 3, args));
    TRY(buffers(frame, &frame->rets, "results", 1, rets));
    TRY(attribute(frame, "kl", &kl));
    TRY(attribute(frame, "ku", &ku));
    TRY(transpose_letter(frame, "gbtrs", &trans));
    const Buffer *lu = &args[0], *pivots = &args[1], *b = &args[2], *x = &rets[0];
    TRY(floating(frame, "gbtrs", lu, 2, &p));
    TRY(expect(frame, "gbtrs", "the pivots", pivots, S32, 1));
    TRY(expect(frame, "gbtrs", "the right-hand sides", b, lu->dtype, 2));
    TRY(expect(frame, "gbtrs", "the solution", x, lu->dtype, 2));
    if (size_of(b) != size_of(x))
        return fail(frame, ERROR_INVALID_ARGUMENT, "gbtrs: b and x differ in size");
    copy_into(b, x, ITEMSIZE[p]);
    int64_t n = lu->dims[lu->rank - 2], ldab = lu->dims[lu->rank - 1];
    Plan plan;
    TRY(plan_solve(frame, "gbtrs", lu, 2, x, n, &plan));
    if (size_of(pivots) != systems_of(lu, 2) * n)
        return fail(frame, ERROR_INVALID_ARGUMENT, "gbtrs: pivots of the wrong size");
    if (n == 0 || plan.columns == 0) return NULL;
    int n_, kl_, ku_, ldab_, columns_;
    TRY(lapack_int(frame, "gbtrs", n, &n_));
    TRY(lapack_int(frame, "gbtrs", kl, &kl_));
    TRY(lapack_int(frame, "gbtrs", ku, &ku_));
    TRY(lapack_int(frame, "gbtrs", ldab, &ldab_));
    TRY(lapack_int(frame, "gbtrs", plan.columns, &columns_));
    if (ldab < 2 * kl + ku + 1)
        return fail(frame, ERROR_INVALID_ARGUMENT, "gbtrs: the band has too few columns");
    size_t lu_step = plan.shared ? 0 : (size_t)(n * ldab) * ITEMSIZE[p];
    size_t x_step = (size_t)(plan.columns * n) * ITEMSIZE[p];
    if (kl <= WRITTEN_OUT_KL) {
        BAND_SOLVE_ROUTINES[p](trans, n, kl, ku, ldab, lu->data, plan.shared ? 0 : n * ldab,
                               (const int32_t *)pivots->data, plan.shared ? 0 : n, x->data,
                               plan.systems, plan.columns);
        return NULL;
    }
    int *one_based = malloc((size_t)n * sizeof(int));
    if (one_based == NULL)
        return fail(frame, ERROR_RESOURCE_EXHAUSTED, "gbtrs: no memory for %lld pivots",
                    (long long)n);
    gbtrs_t *routine = (gbtrs_t *)routines[p][GBTRS];
    XLA_FFI_Error *error = NULL;
    for (int64_t system = 0; system < plan.systems && error == NULL; system++) {
        char *factor = lu->data + system * lu_step, *solution = x->data + system * x_step;
        const int32_t *row = (const int32_t *)pivots->data + (plan.shared ? 0 : system * n);
        int interchanges = 0;
        for (int64_t i = 0; i < n; i++) {
            one_based[i] = row[i] + 1;
            interchanges |= row[i] != i;
        }
        if (!interchanges && n >= NARROW_FROM) {
            tbsv_lu(p, trans, n_, kl_, ku_, ldab_, factor, solution, plan.columns);
            continue;
        }
        int status = 0;
        routine(&trans, &n_, &kl_, &ku_, &columns_, factor, &ldab_, one_based, solution, &n_,
                &status);
        error = check_info(frame, "gbtrs", status);
    }
    free(one_based);
    return error;
}

/* -- banded LU and solve in one call ---------------------------------------------------- */

/* One wide band (more than WRITTEN_OUT_KL subdiagonals) filled in `band`: ?gbtrf, then its
   `columns` right-hand sides in `x` solved as gbtrs_handler solves them; LAPACK's info. */
static int lapack_factor_and_solve(int p, char trans, int n, int kl, int ku, int ldab,
                                   char *band, int *pivots, char *x, int columns) {
    int status = 0;
    ((gbtrf_t *)routines[p][GBTRF])(&n, &n, &kl, &ku, band, &ldab, pivots, &status);
    if (status != 0) return status; /* singular (> 0), or a bug (< 0): no solve */
    int interchanges = 0;
    for (int i = 0; i < n; i++) interchanges |= pivots[i] != i + 1;
    if (!interchanges && n >= NARROW_FROM) {
        tbsv_lu(p, trans, n, kl, ku, ldab, band, x, columns);
        return 0;
    }
    ((gbtrs_t *)routines[p][GBTRS])(&trans, &n, &kl, &ku, &columns, band, &ldab, pivots, x, &n,
                                    &status);
    return status;
}

/* ?gbtrf + ?gbtrs of the matrices of DIA data (a one-shot solve): operands the DIA data
   (..., diagonals, n) (or one matrix for every batch), its placement in LAPACK's bands
   (as for gbtrf) and the right-hand sides (..., k, n); results the solutions (aliased to
   the right-hand sides) and info (...). LANES bands at a time are filled, factored and
   solved in a scratch that stays in cache: no factor of the whole batch is written to
   memory (nor, first, page-faulted in) and read back. A system whose info is not 0 is
   not solved, or solved with its failed factor: the caller discards its solution. */
static XLA_FFI_Error *gbsv_handler(XLA_FFI_CallFrame *frame) {
    if (answered_metadata(frame) || frame->stage != STAGE_EXECUTE) return NULL;
    Buffer args[3], rets[2];
    int64_t kl, ku;
    char trans = 'N';
    int p;
    TRY(buffers(frame, &frame->args, "operands", 3, args));
    TRY(buffers(frame, &frame->rets, "results", 2, rets));
    TRY(attribute(frame, "kl", &kl));
    TRY(attribute(frame, "ku", &ku));
    TRY(transpose_letter(frame, "gbsv", &trans));
    const Buffer *data = &args[0], *b = &args[2], *x = &rets[0], *info = &rets[1];
    TRY(floating(frame, "gbsv", x, 2, &p));
    TRY(expect(frame, "gbsv", "the right-hand sides", b, x->dtype, 2));
    TRY(expect(frame, "gbsv", "info", info, S32, 0));
    int64_t n = x->dims[x->rank - 1], k = x->dims[x->rank - 2], systems = systems_of(x, 2);
    int64_t ldab = 2 * kl + ku + 1;
    if (kl < 0 || ku < 0)
        return fail(frame, ERROR_INVALID_ARGUMENT, "gbsv: negative kl or ku");
    TRY(check_placement(frame, "gbsv", data, &args[1], x->dtype, n, ldab));
    int64_t factors = systems_of(data, 2);
    if (size_of(b) != size_of(x) || size_of(info) != systems ||
        (factors != 1 && factors != systems))
        return fail(frame, ERROR_INVALID_ARGUMENT, "gbsv: operands of inconsistent shapes");
    copy_into(b, x, ITEMSIZE[p]);
    int32_t *infos = (int32_t *)info->data;
    if (n == 0 || systems == 0) {
        for (int64_t system = 0; system < systems; system++) infos[system] = 0;
        return NULL;
    }
    /* One matrix for every batch: one system with all of their columns. */
    int64_t columns = factors == 1 ? k * systems : k;
    int n_ = 0, kl_ = 0, ku_ = 0, ldab_ = 0, columns_ = 0;
    TRY(lapack_int(frame, "gbsv", n, &n_));
    TRY(lapack_int(frame, "gbsv", kl, &kl_));
    TRY(lapack_int(frame, "gbsv", ku, &ku_));
    TRY(lapack_int(frame, "gbsv", ldab, &ldab_));
    TRY(lapack_int(frame, "gbsv", columns, &columns_));
    int64_t lanes = kl > WRITTEN_OUT_KL ? 1 : factors < LANES ? factors : LANES;
    size_t band_bytes = (size_t)(n * ldab) * ITEMSIZE[p];
    char *scratch = malloc((size_t)lanes * (band_bytes + (size_t)n * sizeof(int32_t)));
    if (scratch == NULL)
        return fail(frame, ERROR_RESOURCE_EXHAUSTED, "gbsv: no memory for %lld bands of %lld rows",
                    (long long)lanes, (long long)n);
    int32_t *pivots = (int32_t *)(scratch + (size_t)lanes * band_bytes);
    size_t x_step = (size_t)(columns * n) * ITEMSIZE[p];
    int32_t status[LANES];
    XLA_FFI_Error *error = NULL;
    for (int64_t first = 0; first < factors && error == NULL; first += lanes) {
        int64_t count = factors - first < lanes ? factors - first : lanes;
        char *solution = x->data + (size_t)first * x_step;
        fill_into(data, &args[1], scratch, n, ldab, p, first, count);
        if (kl <= WRITTEN_OUT_KL) {
            BAND_LU_ROUTINES[p](count, n, kl, ku, ldab, scratch, pivots, status);
            BAND_SOLVE_ROUTINES[p](trans, n, kl, ku, ldab, scratch, n * ldab, pivots, n, solution,
                                   count, columns);
        } else {
            status[0] = lapack_factor_and_solve(p, trans, n_, kl_, ku_, ldab_, scratch, pivots,
                                                solution, columns_);
            error = check_info(frame, "gbsv", status[0]);
        }
        for (int64_t lane = 0; lane < count && factors > 1; lane++)
            infos[first + lane] = status[lane];
    }
    free(scratch);
    if (factors == 1)
        for (int64_t system = 0; system < systems; system++) infos[system] = status[0];
    return error;
}

/* -- banded Cholesky -------------------------------------------------------------------- */

static XLA_FFI_Error *pbtrf_handler(XLA_FFI_CallFrame *frame) {
    if (answered_metadata(frame) || frame->stage != STAGE_EXECUTE) return NULL;
    Buffer args[2], rets[2];
    int64_t kd, lower;
    int p;
    TRY(buffers(frame, &frame->args, "operands", 2, args));
    TRY(buffers(frame, &frame->rets, "results", 2, rets));
    TRY(attribute(frame, "kd", &kd));
    TRY(attribute(frame, "lower", &lower));
    const Buffer *c = &rets[0], *info = &rets[1];
    TRY(floating(frame, "pbtrf", c, 2, &p));
    TRY(expect(frame, "pbtrf", "info", info, S32, 0));
    TRY(fill_bands(frame, "pbtrf", &args[0], &args[1], c, p));
    int64_t n = c->dims[c->rank - 2], ldab = c->dims[c->rank - 1], systems = systems_of(c, 2);
    if (size_of(info) != systems)
        return fail(frame, ERROR_INVALID_ARGUMENT, "pbtrf: info of the wrong size");
    int32_t *infos = (int32_t *)info->data;
    if (n == 0) {
        for (int64_t system = 0; system < systems; system++) infos[system] = 0;
        return NULL;
    }
    int n_, kd_, ldab_;
    TRY(lapack_int(frame, "pbtrf", n, &n_));
    TRY(lapack_int(frame, "pbtrf", kd, &kd_));
    TRY(lapack_int(frame, "pbtrf", ldab, &ldab_));
    char uplo = lower ? 'L' : 'U';
    pbtrf_t *routine = (pbtrf_t *)routines[p][PBTRF];
    size_t step = (size_t)(n * ldab) * ITEMSIZE[p];
    if (kd <= WRITTEN_OUT_KL) {
        for (int64_t system = 0; system < systems; system++)
            infos[system] = BAND_CHOLESKY_ROUTINES[p](n, kd, lower != 0, c->data + system * step);
        return NULL;
    }
    for (int64_t system = 0; system < systems; system++) {
        int status = 0;
        routine(&uplo, &n_, &kd_, c->data + system * step, &ldab_, &status);
        TRY(check_info(frame, "pbtrf", status));
        infos[system] = status;
    }
    return NULL;
}

static XLA_FFI_Error *pbtrs_handler(XLA_FFI_CallFrame *frame) {
    if (answered_metadata(frame) || frame->stage != STAGE_EXECUTE) return NULL;
    Buffer args[2], rets[1];
    int64_t kd, lower;
    int p;
    TRY(buffers(frame, &frame->args, "operands", 2, args));
    TRY(buffers(frame, &frame->rets, "results", 1, rets));
    TRY(attribute(frame, "kd", &kd));
    TRY(attribute(frame, "lower", &lower));
    const Buffer *c = &args[0], *b = &args[1], *x = &rets[0];
    TRY(floating(frame, "pbtrs", c, 2, &p));
    TRY(expect(frame, "pbtrs", "the right-hand sides", b, c->dtype, 2));
    TRY(expect(frame, "pbtrs", "the solution", x, c->dtype, 2));
    if (size_of(b) != size_of(x))
        return fail(frame, ERROR_INVALID_ARGUMENT, "pbtrs: b and x differ in size");
    copy_into(b, x, ITEMSIZE[p]);
    int64_t n = c->dims[c->rank - 2], ldab = c->dims[c->rank - 1];
    Plan plan;
    TRY(plan_solve(frame, "pbtrs", c, 2, x, n, &plan));
    if (n == 0 || plan.columns == 0) return NULL;
    int n_, kd_, ldab_, columns_;
    TRY(lapack_int(frame, "pbtrs", n, &n_));
    TRY(lapack_int(frame, "pbtrs", kd, &kd_));
    TRY(lapack_int(frame, "pbtrs", ldab, &ldab_));
    TRY(lapack_int(frame, "pbtrs", plan.columns, &columns_));
    char uplo = lower ? 'L' : 'U';
    pbtrs_t *routine = (pbtrs_t *)routines[p][PBTRS];
    size_t c_step = plan.shared ? 0 : (size_t)(n * ldab) * ITEMSIZE[p];
    size_t x_step = (size_t)(plan.columns * n) * ITEMSIZE[p];
    for (int64_t system = 0; system < plan.systems; system++) {
        int status = 0;
        routine(&uplo, &n_, &kd_, &columns_, c->data + system * c_step, &ldab_,
                x->data + system * x_step, &n_, &status);
        TRY(check_info(frame, "pbtrs", status));
    }
    return NULL;
}

/* The selected inverse of pbtrf's factor `c` (..., n, kd + 1): `z` of c's shape (see
   BAND_SELECTED_INVERSE). A factor whose info was nonzero gives numbers without meaning:
   the caller masks them. */
static XLA_FFI_Error *pbsinv_handler(XLA_FFI_CallFrame *frame) {
    if (answered_metadata(frame) || frame->stage != STAGE_EXECUTE) return NULL;
    Buffer args[1], rets[1];
    int64_t kd, lower;
    int p;
    TRY(buffers(frame, &frame->args, "operands", 1, args));
    TRY(buffers(frame, &frame->rets, "results", 1, rets));
    TRY(attribute(frame, "kd", &kd));
    TRY(attribute(frame, "lower", &lower));
    const Buffer *c = &args[0], *z = &rets[0];
    TRY(floating(frame, "pbsinv", c, 2, &p));
    TRY(expect(frame, "pbsinv", "the selected inverse", z, c->dtype, 2));
    int64_t n = c->dims[c->rank - 2], ldab = c->dims[c->rank - 1];
    if (size_of(z) != size_of(c))
        return fail(frame, ERROR_INVALID_ARGUMENT, "pbsinv: c and z differ in size");
    if (kd < 0 || ldab != kd + 1)
        return fail(frame, ERROR_INVALID_ARGUMENT, "pbsinv: %lld band columns for kd = %lld",
                    (long long)ldab, (long long)kd);
    int64_t systems = systems_of(c, 2);
    size_t step = (size_t)(n * ldab) * ITEMSIZE[p];
    for (int64_t system = 0; system < systems; system++)
        BAND_SELECTED_INVERSE_ROUTINES[p](n, kd, lower != 0, c->data + system * step,
                                          z->data + system * step);
    return NULL;
}

/* -- Gram-Schmidt for GMRES: gram_schmidt ---------------------------------------------- */

/* The norm of x (n elements of precision p), summed in double precision. */
static double vector_norm(const char *x, int64_t n, int p) {
    int64_t count = p >= 2 ? 2 * n : n;
    double sum = 0;
    if (p & 1)
        for (int64_t i = 0; i < count; i++) sum += ((const double *)x)[i] * ((const double *)x)[i];
    else
        for (int64_t i = 0; i < count; i++) sum += (double)((const float *)x)[i] * ((const float *)x)[i];
    return sqrt(sum);
}

/* One pass of classical Gram-Schmidt by two ?gemv: h = V^H w over the k rows of V (each of
   n elements, one after the other: a column-major n x k matrix), then w -= V h. */
static void gram_schmidt_pass(int p, int n, int k, char *V, char *w, char *h) {
    /* {1, 0}, {0, 0}, {-1, 0}: real or complex scalars of either precision. */
    static const double one_d[2] = {1, 0}, zero_d[2] = {0, 0}, minus_d[2] = {-1, 0};
    static const float one_f[2] = {1, 0}, zero_f[2] = {0, 0}, minus_f[2] = {-1, 0};
    void *one = (p & 1) ? (void *)one_d : (void *)one_f;
    void *zero = (p & 1) ? (void *)zero_d : (void *)zero_f;
    void *minus = (p & 1) ? (void *)minus_d : (void *)minus_f;
    gemv_t *gemv = (gemv_t *)routines[p][GEMV];
    char adjoint = p >= 2 ? 'C' : 'T', plain = 'N';
    int unit = 1;
    gemv(&adjoint, &n, &k, one, V, &n, w, &unit, zero, h, &unit);
    gemv(&plain, &n, &k, minus, V, &n, h, &unit, one, w, &unit);
}

/* gmres's orthogonalization of a new Arnoldi vector (jaxdia/_linalg/gmres.py). Operands:
   the basis V (..., rows, n), the vector w (..., n), j (...) int32 (w is orthogonalized
   against rows 0..j) and floor (...) (real); results: w (..., n) (aliased to the operand),
   its coefficients h (..., rows) (zero beyond j) and its new norm (...) (real). A second
   pass runs for a system whose first left w's norm below its floor. */
static XLA_FFI_Error *gram_schmidt_handler(XLA_FFI_CallFrame *frame) {
    if (answered_metadata(frame) || frame->stage != STAGE_EXECUTE) return NULL;
    Buffer args[4], rets[3];
    int p;
    TRY(buffers(frame, &frame->args, "operands", 4, args));
    TRY(buffers(frame, &frame->rets, "results", 3, rets));
    const Buffer *V = &args[0], *w_in = &args[1], *j = &args[2], *floor_ = &args[3];
    const Buffer *w = &rets[0], *h = &rets[1], *norm = &rets[2];
    TRY(floating(frame, "gram_schmidt", w, 1, &p));
    TRY(expect(frame, "gram_schmidt", "the basis", V, w->dtype, 2));
    TRY(expect(frame, "gram_schmidt", "the vector", w_in, w->dtype, 1));
    TRY(expect(frame, "gram_schmidt", "the coefficients", h, w->dtype, 1));
    TRY(expect(frame, "gram_schmidt", "j", j, S32, 0));
    TRY(expect(frame, "gram_schmidt", "the floor", floor_, REAL_DTYPE[p], 0));
    TRY(expect(frame, "gram_schmidt", "the norm", norm, REAL_DTYPE[p], 0));
    int64_t n = w->dims[w->rank - 1], rows = V->dims[V->rank - 2];
    int64_t systems = systems_of(w, 1);
    if (V->dims[V->rank - 1] != n || systems_of(V, 2) != systems || size_of(w_in) != size_of(w) ||
        systems_of(h, 1) != systems || h->dims[h->rank - 1] != rows || size_of(j) != systems ||
        size_of(floor_) != systems || size_of(norm) != systems)
        return fail(frame, ERROR_INVALID_ARGUMENT, "gram_schmidt: operands of inconsistent shapes");
    copy_into(w_in, w, ITEMSIZE[p]);
    size_t item = ITEMSIZE[p];
    if (systems > 0 && rows > 0) memset(h->data, 0, (size_t)(systems * rows) * item);
    int n_, rows_;
    TRY(lapack_int(frame, "gram_schmidt", n, &n_));
    TRY(lapack_int(frame, "gram_schmidt", rows, &rows_));
    char *correction = malloc(rows ? (size_t)rows * item : 1);
    if (correction == NULL)
        return fail(frame, ERROR_RESOURCE_EXHAUSTED, "gram_schmidt: out of memory");
    const int32_t *js = (const int32_t *)j->data;
    for (int64_t system = 0; system < systems; system++) {
        int k = js[system] + 1;
        if (k < 1 || k > rows_) {
            free(correction);
            return fail(frame, ERROR_INVALID_ARGUMENT, "gram_schmidt: j = %d outside 0..%d",
                        k - 1, rows_ - 1);
        }
        char *Vs = V->data + (size_t)(system * rows * n) * item;
        char *ws = w->data + (size_t)(system * n) * item;
        char *hs = h->data + (size_t)(system * rows) * item;
        double floor_s = (p & 1) ? ((const double *)floor_->data)[system]
                                 : ((const float *)floor_->data)[system];
        double after = 0;
        if (n_ > 0) {
            gram_schmidt_pass(p, n_, k, Vs, ws, hs);
            after = vector_norm(ws, n, p);
            if (after < floor_s) {
                gram_schmidt_pass(p, n_, k, Vs, ws, correction);
                int64_t reals = p >= 2 ? 2 * (int64_t)k : k;
                if (p & 1)
                    for (int64_t i = 0; i < reals; i++)
                        ((double *)hs)[i] += ((const double *)correction)[i];
                else
                    for (int64_t i = 0; i < reals; i++)
                        ((float *)hs)[i] += ((const float *)correction)[i];
                after = vector_norm(ws, n, p);
            }
        }
        if (p & 1)
            ((double *)norm->data)[system] = after;
        else
            ((float *)norm->data)[system] = (float)after;
    }
    free(correction);
    return NULL;
}

/* -- tridiagonal LU: rows dl, d, du, du2 of a (..., 4, n) array ------------------------- */

static XLA_FFI_Error *gttrf_handler(XLA_FFI_CallFrame *frame) {
    if (answered_metadata(frame) || frame->stage != STAGE_EXECUTE) return NULL;
    Buffer args[1], rets[3];
    int p;
    TRY(buffers(frame, &frame->args, "operands", 1, args));
    TRY(buffers(frame, &frame->rets, "results", 3, rets));
    const Buffer *bands = &args[0], *lu = &rets[0], *pivots = &rets[1], *info = &rets[2];
    TRY(floating(frame, "gttrf", lu, 2, &p));
    TRY(expect(frame, "gttrf", "the bands", bands, lu->dtype, 2));
    TRY(expect(frame, "gttrf", "the pivots", pivots, S32, 1));
    TRY(expect(frame, "gttrf", "info", info, S32, 0));
    int64_t n = lu->dims[lu->rank - 1], systems = systems_of(lu, 2);
    if (lu->dims[lu->rank - 2] != 4 || size_of(bands) != size_of(lu) ||
        size_of(pivots) != systems * n || size_of(info) != systems)
        return fail(frame, ERROR_INVALID_ARGUMENT, "gttrf: operands of inconsistent shapes");
    copy_into(bands, lu, ITEMSIZE[p]);
    int32_t *infos = (int32_t *)info->data;
    if (n == 0) {
        for (int64_t system = 0; system < systems; system++) infos[system] = 0;
        return NULL;
    }
    int n_;
    TRY(lapack_int(frame, "gttrf", n, &n_));
    gttrf_t *routine = (gttrf_t *)routines[p][GTTRF];
    size_t row = (size_t)n * ITEMSIZE[p];
    for (int64_t system = 0; system < systems; system++) {
        char *base = lu->data + system * 4 * row;
        int32_t *pivot = (int32_t *)pivots->data + system * n;
        int status = 0;
        routine(&n_, base, base + row, base + 2 * row, base + 3 * row, pivot, &status);
        TRY(check_info(frame, "gttrf", status));
        infos[system] = status;
        for (int64_t i = 0; i < n; i++) pivot[i] -= 1;
    }
    return NULL;
}

static XLA_FFI_Error *gttrs_handler(XLA_FFI_CallFrame *frame) {
    if (answered_metadata(frame) || frame->stage != STAGE_EXECUTE) return NULL;
    Buffer args[3], rets[1];
    char trans;
    int p;
    TRY(buffers(frame, &frame->args, "operands", 3, args));
    TRY(buffers(frame, &frame->rets, "results", 1, rets));
    TRY(transpose_letter(frame, "gttrs", &trans));
    const Buffer *lu = &args[0], *pivots = &args[1], *b = &args[2], *x = &rets[0];
    TRY(floating(frame, "gttrs", lu, 2, &p));
    TRY(expect(frame, "gttrs", "the pivots", pivots, S32, 1));
    TRY(expect(frame, "gttrs", "the right-hand sides", b, lu->dtype, 2));
    TRY(expect(frame, "gttrs", "the solution", x, lu->dtype, 2));
    if (size_of(b) != size_of(x))
        return fail(frame, ERROR_INVALID_ARGUMENT, "gttrs: b and x differ in size");
    copy_into(b, x, ITEMSIZE[p]);
    int64_t n = lu->dims[lu->rank - 1];
    Plan plan;
    TRY(plan_solve(frame, "gttrs", lu, 2, x, n, &plan));
    if (lu->dims[lu->rank - 2] != 4 || size_of(pivots) != systems_of(lu, 2) * n)
        return fail(frame, ERROR_INVALID_ARGUMENT, "gttrs: operands of inconsistent shapes");
    if (n == 0 || plan.columns == 0) return NULL;
    int n_, columns_;
    TRY(lapack_int(frame, "gttrs", n, &n_));
    TRY(lapack_int(frame, "gttrs", plan.columns, &columns_));
    int *one_based = malloc((size_t)n * sizeof(int));
    if (one_based == NULL)
        return fail(frame, ERROR_RESOURCE_EXHAUSTED, "gttrs: no memory for %lld pivots",
                    (long long)n);
    gttrs_t *routine = (gttrs_t *)routines[p][GTTRS];
    size_t row = (size_t)n * ITEMSIZE[p];
    size_t lu_step = plan.shared ? 0 : 4 * row;
    size_t x_step = (size_t)(plan.columns * n) * ITEMSIZE[p];
    XLA_FFI_Error *error = NULL;
    for (int64_t system = 0; system < plan.systems && error == NULL; system++) {
        char *base = lu->data + system * lu_step;
        const int32_t *pivot = (const int32_t *)pivots->data + (plan.shared ? 0 : system * n);
        for (int64_t i = 0; i < n; i++) one_based[i] = pivot[i] + 1;
        int status = 0;
        routine(&trans, &n_, &columns_, base, base + row, base + 2 * row, base + 3 * row,
                one_based, x->data + system * x_step, &n_, &status);
        error = check_info(frame, "gttrs", status);
    }
    free(one_based);
    return error;
}

/* -- tridiagonal L D L^H: d (real) and e ------------------------------------------------ */

static XLA_FFI_Error *pttrf_handler(XLA_FFI_CallFrame *frame) {
    if (answered_metadata(frame) || frame->stage != STAGE_EXECUTE) return NULL;
    Buffer args[2], rets[3];
    int p;
    TRY(buffers(frame, &frame->args, "operands", 2, args));
    TRY(buffers(frame, &frame->rets, "results", 3, rets));
    const Buffer *d = &rets[0], *e = &rets[1], *info = &rets[2];
    TRY(floating(frame, "pttrf", e, 1, &p));
    TRY(expect(frame, "pttrf", "d", d, REAL_DTYPE[p], 1));
    TRY(expect(frame, "pttrf", "d", &args[0], REAL_DTYPE[p], 1));
    TRY(expect(frame, "pttrf", "e", &args[1], e->dtype, 1));
    TRY(expect(frame, "pttrf", "info", info, S32, 0));
    int64_t n = d->dims[d->rank - 1], systems = systems_of(d, 1);
    if (size_of(e) != systems * n || size_of(&args[0]) != size_of(d) ||
        size_of(&args[1]) != size_of(e) || size_of(info) != systems)
        return fail(frame, ERROR_INVALID_ARGUMENT, "pttrf: operands of inconsistent shapes");
    copy_into(&args[0], d, ITEMSIZE[p & 1]); /* d is real */
    copy_into(&args[1], e, ITEMSIZE[p]);
    int32_t *infos = (int32_t *)info->data;
    if (n == 0) {
        for (int64_t system = 0; system < systems; system++) infos[system] = 0;
        return NULL;
    }
    int n_;
    TRY(lapack_int(frame, "pttrf", n, &n_));
    pttrf_t *routine = (pttrf_t *)routines[p][PTTRF];
    size_t d_row = (size_t)n * ITEMSIZE[p & 1], e_row = (size_t)n * ITEMSIZE[p];
    for (int64_t system = 0; system < systems; system++) {
        int status = 0;
        routine(&n_, d->data + system * d_row, e->data + system * e_row, &status);
        TRY(check_info(frame, "pttrf", status));
        infos[system] = status;
    }
    return NULL;
}

static XLA_FFI_Error *pttrs_handler(XLA_FFI_CallFrame *frame) {
    if (answered_metadata(frame) || frame->stage != STAGE_EXECUTE) return NULL;
    Buffer args[3], rets[1];
    int p;
    TRY(buffers(frame, &frame->args, "operands", 3, args));
    TRY(buffers(frame, &frame->rets, "results", 1, rets));
    const Buffer *d = &args[0], *e = &args[1], *b = &args[2], *x = &rets[0];
    TRY(floating(frame, "pttrs", x, 2, &p));
    TRY(expect(frame, "pttrs", "d", d, REAL_DTYPE[p], 1));
    TRY(expect(frame, "pttrs", "e", e, x->dtype, 1));
    TRY(expect(frame, "pttrs", "the right-hand sides", b, x->dtype, 2));
    if (size_of(b) != size_of(x) || size_of(d) != size_of(e))
        return fail(frame, ERROR_INVALID_ARGUMENT, "pttrs: operands of inconsistent shapes");
    copy_into(b, x, ITEMSIZE[p]);
    int64_t n = d->dims[d->rank - 1];
    Plan plan;
    TRY(plan_solve(frame, "pttrs", d, 1, x, n, &plan));
    if (n == 0 || plan.columns == 0) return NULL;
    int n_, columns_;
    TRY(lapack_int(frame, "pttrs", n, &n_));
    TRY(lapack_int(frame, "pttrs", plan.columns, &columns_));
    size_t d_row = plan.shared ? 0 : (size_t)n * ITEMSIZE[p & 1];
    size_t e_row = plan.shared ? 0 : (size_t)n * ITEMSIZE[p];
    size_t x_step = (size_t)(plan.columns * n) * ITEMSIZE[p];
    /* e holds the subdiagonal of L (A = L D L^H): uplo "L" for the complex routine. */
    char uplo = 'L';
    for (int64_t system = 0; system < plan.systems; system++) {
        char *d_system = d->data + system * d_row, *e_system = e->data + system * e_row;
        char *x_system = x->data + system * x_step;
        int status = 0;
        if (p >= 2)
            ((complex_pttrs_t *)routines[p][PTTRS])(&uplo, &n_, &columns_, d_system, e_system,
                                                   x_system, &n_, &status);
        else
            ((real_pttrs_t *)routines[p][PTTRS])(&n_, &columns_, d_system, e_system, x_system,
                                                &n_, &status);
        TRY(check_info(frame, "pttrs", status));
    }
    return NULL;
}

/* -- the module ------------------------------------------------------------------------- */

typedef XLA_FFI_Error *Handler(XLA_FFI_CallFrame *);

static const struct {
    const char *name;
    Handler *handler;
} HANDLERS[] = {
    {"gbtrf", gbtrf_handler}, {"gbtrs", gbtrs_handler}, {"gbsv", gbsv_handler},
    {"pbtrf", pbtrf_handler},
    {"pbtrs", pbtrs_handler}, {"gttrf", gttrf_handler}, {"gttrs", gttrs_handler},
    {"pttrf", pttrf_handler}, {"pttrs", pttrs_handler}, {"pbsinv", pbsinv_handler},
    {"gram_schmidt", gram_schmidt_handler},
};

static int routines_set = 0;

/* Reads every routine's function pointer from `capsules` (a mapping of names such as
   "dgbtrf" to SciPy's capsules) into `routines`. */
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
    if (routines_set) {
        /* Handlers registered with XLA may be running: the pointers must stay. */
        if (memcmp(found, routines, sizeof found) != 0) {
            PyErr_SetString(PyExc_RuntimeError,
                            "jaxdia's LAPACK handlers already use other LAPACK routines");
            return -1;
        }
        return 0;
    }
    memcpy(routines, found, sizeof found);
    routines_set = 1;
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
             "``pttrf``, ``pttrs``, ``pbsinv``, ``gram_schmidt``), calling the routines of ``routines``: a mapping of\n"
             "LAPACK/BLAS names (``dgbtrf``, ``ztbsv``, ...) to SciPy's ``__pyx_capi__``\n"
             "capsules.");

static PyMethodDef METHODS[] = {
    {"targets", targets, METH_O, targets_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef MODULE = {
    PyModuleDef_HEAD_INIT,
    .m_name = "jaxdia._kernels._lapack_ffi",
    .m_doc = "XLA FFI handlers that call SciPy's LAPACK (jaxdia/_kernels/_lapack_ffi.c).",
    .m_size = 0,
    .m_methods = METHODS,
};

PyMODINIT_FUNC PyInit__lapack_ffi(void) { return PyModuleDef_Init(&MODULE); }
