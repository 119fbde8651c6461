/* The call frame: what every handler reads from XLA (its buffers and attributes) and how it
   reports an error; the checks the handlers share. */

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "lapack_ffi.h"

XLA_FFI_Error *fail(const XLA_FFI_CallFrame *frame, int code, const char *format, ...) {
    char message[256];
    va_list arguments;
    va_start(arguments, format);
    vsnprintf(message, sizeof message, format, arguments);
    va_end(arguments);
    XLA_FFI_Error_Create_Args args = {sizeof args, NULL, message, code};
    return frame->api->XLA_FFI_Error_Create(&args);
}

int answered_metadata(XLA_FFI_CallFrame *frame) {
    XLA_FFI_Extension_Base *extension = frame->extension_start;
    if (extension == NULL || extension->type != EXTENSION_METADATA) return 0;
    XLA_FFI_Metadata *metadata = ((XLA_FFI_Metadata_Extension *)extension)->metadata;
    XLA_FFI_Api_Version version = {sizeof version, NULL, 0, 1};
    metadata->api_version = version;
    metadata->traits = 0;
    return 1;
}

XLA_FFI_Error *buffers(const XLA_FFI_CallFrame *frame, const XLA_FFI_List *list,
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

XLA_FFI_Error *attribute(const XLA_FFI_CallFrame *frame, const char *name, int64_t *value) {
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

XLA_FFI_Error *expect(const XLA_FFI_CallFrame *frame, const char *routine, const char *name,
                      const Buffer *buffer, int dtype, int core) {
    if (buffer->dtype != dtype)
        return fail(frame, ERROR_UNIMPLEMENTED, "%s: %s has XLA dtype %d, expected %d", routine,
                    name, buffer->dtype, dtype);
    if (buffer->rank < core)
        return fail(frame, ERROR_INVALID_ARGUMENT, "%s: %s has rank %lld, expected >= %d",
                    routine, name, (long long)buffer->rank, core);
    return NULL;
}

XLA_FFI_Error *floating(const XLA_FFI_CallFrame *frame, const char *routine,
                        const Buffer *buffer, int core, int *p) {
    *p = precision(buffer->dtype);
    if (*p < 0)
        return fail(frame, ERROR_UNIMPLEMENTED,
                    "%s: XLA dtype %d is not float32, float64, complex64 or complex128", routine,
                    buffer->dtype);
    return expect(frame, routine, "the factor", buffer, buffer->dtype, core);
}

XLA_FFI_Error *lapack_int(const XLA_FFI_CallFrame *frame, const char *routine, int64_t value,
                          int *out) {
    if (value < 0 || value > INT32_MAX)
        return fail(frame, ERROR_INVALID_ARGUMENT, "%s: %lld does not fit LAPACK's int",
                    routine, (long long)value);
    *out = (int)value;
    return NULL;
}

XLA_FFI_Error *check_info(const XLA_FFI_CallFrame *frame, const char *routine, int info) {
    if (info < 0)
        return fail(frame, ERROR_INTERNAL, "%s: argument %d had an illegal value", routine,
                    -info);
    return NULL;
}

XLA_FFI_Error *transpose_letter(const XLA_FFI_CallFrame *frame, const char *routine,
                                char *letter) {
    int64_t trans = 0;
    TRY(attribute(frame, "trans", &trans));
    if (trans < 0 || trans > 2)
        return fail(frame, ERROR_INVALID_ARGUMENT, "%s: trans must be 0, 1 or 2, not %lld",
                    routine, (long long)trans);
    *letter = "NTC"[trans];
    return NULL;
}

void copy_into(const Buffer *source, const Buffer *target, size_t itemsize) {
    size_t bytes = (size_t)size_of(target) * itemsize;
    if (source->data != target->data && bytes) memcpy(target->data, source->data, bytes);
}

XLA_FFI_Error *plan_solve(const XLA_FFI_CallFrame *frame, const char *routine,
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
