#pragma once
// Runs a kernel test once per SIMD target that is both compiled in and supported by this CPU,
// then restores the normal dispatch (header-only). A SIMD path must equal its scalar reference on
// every target, not only on the best one this CPU would pick.
#include <hwy/targets.h>

#include <cstdint>
#include <type_traits>

namespace test_support {

// body(target_name) once per target, the target forced for everything dispatched inside it.
// A body that also takes the target's id, body(target_name, target_id), gets it too: for a test
// that runs only some targets (those with fused multiply-adds: `if (target_id > HWY_AVX2) return;`).
template <class Body>
void for_each_simd_target(Body body) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    if constexpr (std::is_invocable_v<Body&, const char*, int64_t>) {
      body(hwy::TargetName(target), target);
    } else {
      body(hwy::TargetName(target));
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace test_support
