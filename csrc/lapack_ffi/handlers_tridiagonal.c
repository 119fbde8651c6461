/* The handlers of the tridiagonal factorizations, LAPACK's own: LU (?gttrf, ?gttrs) and
   L D L^H (?pttrf, ?pttrs). */

#include <stdlib.h>

#include "lapack_ffi.h"

/* -- tridiagonal LU: rows dl, d, du, du2 of a (..., 4, n) array ------------------------- */

XLA_FFI_Error *gttrf_handler(XLA_FFI_CallFrame *frame) {
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

XLA_FFI_Error *gttrs_handler(XLA_FFI_CallFrame *frame) {
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

XLA_FFI_Error *pttrf_handler(XLA_FFI_CallFrame *frame) {
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

XLA_FFI_Error *pttrs_handler(XLA_FFI_CallFrame *frame) {
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
