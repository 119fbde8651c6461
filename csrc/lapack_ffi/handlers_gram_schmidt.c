/* The handler of GMRES's Gram-Schmidt: a new Arnoldi vector orthogonalized against the
   basis by BLAS's ?gemv, with a second pass where the first lost too much of its norm. */

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "lapack_ffi.h"

/* The norm of x (n elements of precision p), summed in double precision. */
static double vector_norm(const char *x, int64_t n, int p) {
    int64_t count = p >= 2 ? 2 * n : n;
    double sum = 0;
    if (p & 1)
        for (int64_t i = 0; i < count; i++) sum += ((const double *)x)[i] * ((const double *)x)[i];
    else
        for (int64_t i = 0; i < count; i++)
            sum += (double)((const float *)x)[i] * ((const float *)x)[i];
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
XLA_FFI_Error *gram_schmidt_handler(XLA_FFI_CallFrame *frame) {
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
