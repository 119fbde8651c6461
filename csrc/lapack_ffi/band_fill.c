/* Filling LAPACK's band arrays from DIA data: the banded factorizations' first step, in the
   handler, so that no band array is built by XLA, written to memory and read back. */

#include <string.h>
#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "lapack_ffi.h"

#if defined(__GNUC__)
#define ALWAYS_INLINE inline __attribute__((always_inline))
#else
#define ALWAYS_INLINE inline
#endif

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

/* Entry i of an integer buffer of int32 or int64 (the placement is int32 when JAX runs
   with x64 off, whatever dtype lapack.py asks for). */
static int64_t entry(const Buffer *buffer, int64_t i) {
    return buffer->dtype == S64 ? ((const int64_t *)buffer->data)[i]
                                : ((const int32_t *)buffer->data)[i];
}

XLA_FFI_Error *check_placement(const XLA_FFI_CallFrame *frame, const char *routine,
                               const Buffer *data, const Buffer *layout, int dtype, int64_t n,
                               int64_t ldab) {
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

XLA_FFI_Error *prepare_bands(const XLA_FFI_CallFrame *frame, const char *routine,
                             const Buffer *data, const Buffer *layout, const Buffer *bands,
                             int p) {
    int64_t n = bands->dims[bands->rank - 2], ldab = bands->dims[bands->rank - 1];
    TRY(check_placement(frame, routine, data, layout, bands->dtype, n, ldab));
    int64_t systems = systems_of(bands, 2);
    if (systems_of(data, 2) != systems)
        return fail(frame, ERROR_INVALID_ARGUMENT, "%s: the DIA data does not match the band",
                    routine);
    huge_pages(bands->data, (size_t)(systems * n * ldab) * ITEMSIZE[p]);
    return NULL;
}

/* fill_into's copies, of elements of `itemsize` bytes: constant where it is inlined, so
   that each element is one load and one store, whatever its type. */
static ALWAYS_INLINE void fill_elements(const Buffer *data, const Buffer *layout, char *into,
                                        int64_t n, int64_t ldab, size_t itemsize,
                                        int64_t first, int64_t count) {
    int64_t diagonals = data->dims[data->rank - 2];
    for (int64_t system = first; system < first + count; system++) {
        char *target = into + (size_t)((system - first) * n * ldab) * itemsize;
        const char *source = data->data + (size_t)(system * diagonals * n) * itemsize;
        for (int64_t k = 0; k < diagonals; k++) {
            int64_t offset = entry(layout, 2 * k), column = entry(layout, 2 * k + 1);
            if (column < 0) continue;
            int64_t start = offset > 0 ? offset : 0, stop = offset < 0 ? n + offset : n;
            for (int64_t j = start; j < stop; j++)
                memcpy(target + (size_t)(j * ldab + column) * itemsize,
                       source + (size_t)(k * n + j) * itemsize, itemsize);
        }
    }
}

void fill_into(const Buffer *data, const Buffer *layout, char *into, int64_t n, int64_t ldab,
               int p, int64_t first, int64_t count) {
    size_t bytes = (size_t)(count * n * ldab) * ITEMSIZE[p];
    if (bytes == 0) return;
    memset(into, 0, bytes);
    switch (ITEMSIZE[p]) {
    case 4: fill_elements(data, layout, into, n, ldab, 4, first, count); break;
    case 8: fill_elements(data, layout, into, n, ldab, 8, first, count); break;
    default: fill_elements(data, layout, into, n, ldab, 16, first, count); break;
    }
}

void fill_systems(const Buffer *data, const Buffer *layout, const Buffer *bands, int p,
                  int64_t first, int64_t count) {
    int64_t n = bands->dims[bands->rank - 2], ldab = bands->dims[bands->rank - 1];
    fill_into(data, layout, bands->data + (size_t)(first * n * ldab) * ITEMSIZE[p], n, ldab, p,
              first, count);
}

XLA_FFI_Error *fill_bands(const XLA_FFI_CallFrame *frame, const char *routine,
                          const Buffer *data, const Buffer *layout, const Buffer *bands, int p) {
    TRY(prepare_bands(frame, routine, data, layout, bands, p));
    fill_systems(data, layout, bands, p, 0, systems_of(bands, 2));
    return NULL;
}
