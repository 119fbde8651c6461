/* The written-out band routines (band_routines.inc) in single-precision real (float32). */

#define PREFIX s
#define REAL float
#define COMPLEX 0
#define SQRT sqrtf
#include "band_routines.inc"
