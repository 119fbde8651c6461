/* The written-out band routines (band_routines.inc) in double-precision real (float64). */

#define PREFIX d
#define REAL double
#define COMPLEX 0
#define SQRT sqrt
#include "band_routines.inc"
