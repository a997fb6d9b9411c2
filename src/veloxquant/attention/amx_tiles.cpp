// amx_tiles.h: the run-time check and the per-thread tile configuration.
#include "veloxquant/attention/amx_tiles.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>

namespace veloxquant::attention::kernels {
namespace {

// CPUID leaf 7: AMX-TILE and AMX-INT8 (EDX bits 24, 25); then the kernel's leave to use the tile
// data registers (Linux 5.16+).
bool detect_amx() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
  if (((d >> 24) & 1u) == 0 || ((d >> 25) & 1u) == 0) return false;
  if (!__builtin_cpu_supports("avx512bw") || !__builtin_cpu_supports("avx512vl") ||
      !__builtin_cpu_supports("avx512vbmi")) {
    return false;
  }
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
}

struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0, reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

__attribute__((target("amx-tile"))) void load_square_config() {
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) {
    cfg.rows[t] = 16;
    cfg.colsb[t] = 64;
  }
  // GCC's _tile_loadconfig names only the configuration's first bytes as its memory input, so
  // without this barrier the stores of the rows and column bytes above are dropped as dead.
  __asm__ __volatile__("" : : "r"(&cfg) : "memory");
  _tile_loadconfig(&cfg);
}

}  // namespace

bool amx_int8_usable() {
  static const bool ok = [] {
    const char* off = std::getenv("VQ_DISABLE_AMX");
    return !(off != nullptr && off[0] == '1') && detect_amx();
  }();
  return ok;
}

void use_square_tiles() {
  // Nothing in this library releases the tiles or loads another configuration, so a thread's
  // flag stays true to what its tile configuration is.
  thread_local bool loaded = false;
  if (loaded) return;
  load_square_config();
  loaded = true;
}

}  // namespace veloxquant::attention::kernels
