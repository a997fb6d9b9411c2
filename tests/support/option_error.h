#pragma once
// What building a method's cache says about one bad option: every method test checks that its
// QuantizerConfigError names the field, and each used to write the same build-and-catch lambda.
#include <cstdint>
#include <functional>
#include <string>

#include "veloxquant/veloxquant.h"

namespace test_support {

// Builds `method` at `head_dim` with its Options changed by `change`; returns the
// QuantizerConfigError's message, or "accepted" when the build succeeds.
template <class Options>
std::string option_error(const std::string& method, const std::function<void(Options&)>& change,
                         int64_t head_dim = 16) {
  veloxquant::KVCacheConfig c;
  c.method = method;
  c.head_dim = head_dim;
  change(c.options<Options>());
  try {
    veloxquant::KVCacheBuilder(c).build();
  } catch (const veloxquant::QuantizerConfigError& e) {
    return e.what();
  }
  return "accepted";
}

}  // namespace test_support
