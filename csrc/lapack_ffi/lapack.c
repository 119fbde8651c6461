/* LAPACK and BLAS, through SciPy's Cython exports: the table of the routines the handlers
   call, filled once from `scipy.linalg.cython_lapack`'s and `cython_blas`'s capsules
   (module.c reads them), so that the extension links against nothing but Python. */

#include <string.h>

#include "lapack_ffi.h"

const char *const ROUTINE_NAMES[ROUTINES] = {
    "gbtrf", "gbtrs", "tbsv", "pbtrf", "pbtrs", "gttrf", "gttrs", "pttrf", "pttrs", "gemv",
};
const char PREFIXES[4] = {'s', 'd', 'c', 'z'};
void *routines[4][ROUTINES];

static int routines_set = 0;

int set_routines(void *found[4][ROUTINES]) {
    if (routines_set) return memcmp(found, routines, sizeof routines) == 0 ? 0 : -1;
    memcpy(routines, found, sizeof routines);
    routines_set = 1;
    return 0;
}
