#pragma once
// What the AMX-INT8 kernels (attention/code_value_sums.h, attention/code_key_scores.h) share: the
// run-time check that this CPU and OS let a process use the tile registers, and one tile
// configuration that every such kernel works in.
//
// One configuration for all of them, loaded once per thread and never released: every tile is 16
// rows of 64 bytes. LDTILECFG + TILERELEASE cost ~110 ns together here (measured in a loop), about
// what one 64-row tile of the value sums' products takes, and a decode step enters the kernels
// once per 64-row tile and side; with one shape they never reload it. Kernels that need fewer
// rows of a tile zero the rest (a product over zero rows costs ~15% more than over 9 rows, far
// less than the reload). The tile state stays "in use" on threads that ran a kernel: the OS saves
// it with the thread's other vector state on a context switch, as it does the AVX-512 registers.
#include <cstdint>

namespace veloxquant::attention::kernels {

// Whether the AMX-INT8 kernels run here: CPUID's AMX-TILE and AMX-INT8 with AVX-512 BW/VL/VBMI,
// the OS's leave (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA), for the whole process),
// and no VQ_DISABLE_AMX=1 in the environment (so one binary can be measured both ways). Decided
// once per process.
bool amx_int8_usable();

// Loads the shared configuration (8 tiles of 16 x 64 bytes) on the calling thread unless this
// thread already did; only after amx_int8_usable() returned true. Every tile instruction of the
// kernels runs after it on the same thread.
void use_square_tiles();

}  // namespace veloxquant::attention::kernels
