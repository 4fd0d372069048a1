// AVX2 build of the update kernels (compiled with -mavx2; selected at run time).
#define GS_OPTIM_NS avx2
#include "common/optim/internal/kernels_impl.inc"
