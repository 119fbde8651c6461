/* The handlers of the banded LU (?gbtrf, ?gbtrs, and both in one call: gbsv) and Cholesky
   (?pbtrf, ?pbtrs) factorizations: LAPACK's routines for wide bands, the written-out ones
   (band_routines.inc) for narrow bands. */

#include <stdlib.h>

#include "lapack_ffi.h"

/* The written-out routines, by precision. */
static band_lu_t *const BAND_LU_ROUTINES[4] = {s_band_lu, d_band_lu, c_band_lu, z_band_lu};
static band_solve_t *const BAND_SOLVE_ROUTINES[4] = {s_band_solve, d_band_solve, c_band_solve,
                                                     z_band_solve};
static band_cholesky_t *const BAND_CHOLESKY_ROUTINES[4] = {s_band_cholesky, d_band_cholesky,
                                                           c_band_cholesky, z_band_cholesky};

/* Bands with at most this many subdiagonals are factored and solved by the written-out
   routines, whatever ku (LAPACK's ?gbtrf factors them with ?gbtf2 too: it blocks only bands
   with kl at least its block size, 32); wider ones by LAPACK, whose BLAS kernels, vectorized
   over the kl + 1 rows of a column, take about as long from kl = 6 on and less from
   kl = 24. */
#define WRITTEN_OUT_KL 4

/* -- banded LU -------------------------------------------------------------------------- */

XLA_FFI_Error *gbtrf_handler(XLA_FFI_CallFrame *frame) {
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

/* ?gbtrs. A factor computed without row interchanges (a diagonally dominant matrix, say)
   has a U of bandwidth ku, not the kl + ku that ?gbtrs sweeps: then ?tbsv over L's and U's
   own bands does the work instead. A band of at most WRITTEN_OUT_KL subdiagonals takes the
   written-out solve, which sweeps U's ku superdiagonals only in that case itself. */
XLA_FFI_Error *gbtrs_handler(XLA_FFI_CallFrame *frame) {
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
XLA_FFI_Error *gbsv_handler(XLA_FFI_CallFrame *frame) {
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

XLA_FFI_Error *pbtrf_handler(XLA_FFI_CallFrame *frame) {
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

XLA_FFI_Error *pbtrs_handler(XLA_FFI_CallFrame *frame) {
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
