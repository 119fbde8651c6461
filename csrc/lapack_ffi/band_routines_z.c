/* The written-out band routines (band_routines.inc) in double-precision complex (complex128). */

#define PREFIX z
#define REAL double
#define COMPLEX 1
#define SQRT sqrt
#include "band_routines.inc"
