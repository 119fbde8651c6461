/* The written-out band routines (band_routines.inc) in single-precision complex (complex64). */

#define PREFIX c
#define REAL float
#define COMPLEX 1
#define SQRT sqrtf
#include "band_routines.inc"
