/* The handler of the selected inverse of a banded Cholesky factor: the band of A^-1 from
   ?pbtrf's factor of A (jaxdia's selected_inverse and slogdet's gradient), by the
   written-out recurrences of band_routines.inc. */

#include "lapack_ffi.h"

static band_selected_inverse_t *const BAND_SELECTED_INVERSE_ROUTINES[4] = {
    s_band_selected_inverse,
    d_band_selected_inverse,
    c_band_selected_inverse,
    z_band_selected_inverse,
};

/* The selected inverse of pbtrf's factor `c` (..., n, kd + 1): `z` of c's shape (see
   band_routines.inc). A factor whose info was nonzero gives numbers without meaning:
   the caller masks them. */
XLA_FFI_Error *pbsinv_handler(XLA_FFI_CallFrame *frame) {
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
