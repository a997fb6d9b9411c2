#pragma once
// Runs a kernel test once per SIMD target that is both compiled in and supported by this CPU,
// then restores the normal dispatch (header-only). A SIMD path must equal its scalar reference on
// every target, not only on the best one this CPU would pick.
#include <hwy/targets.h>

#include <cstdint>

namespace test_support {

// body(target_name) once per target, the target forced for everything dispatched inside it.
template <class Body>
void for_each_simd_target(Body body) {
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    body(hwy::TargetName(target));
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace test_support
