// The eviction family's registrations (spec §2.3, §6): one line per method. Each method's
// registration — name, options, factory, restore factory, budget setter, card — is defined
// beside its cache in eviction/methods/<name>_cache.cpp.
#include <vector>

#include "veloxquant/eviction/methods/cam_cache.h"
#include "veloxquant/eviction/methods/chunkkv_cache.h"
#include "veloxquant/eviction/methods/curdkv_cache.h"
#include "veloxquant/eviction/methods/h2o_cache.h"
#include "veloxquant/eviction/methods/keyformer_cache.h"
#include "veloxquant/eviction/methods/knorm_cache.h"
#include "veloxquant/eviction/methods/kvzip_cache.h"
#include "veloxquant/eviction/methods/morphkv_cache.h"
#include "veloxquant/eviction/methods/nestedkv_cache.h"
#include "veloxquant/eviction/methods/pyramidkv_cache.h"
#include "veloxquant/eviction/methods/qfilters_cache.h"
#include "veloxquant/eviction/methods/rocketkv_cache.h"
#include "veloxquant/eviction/methods/snapkv_cache.h"
#include "veloxquant/eviction/methods/squeeze_cache.h"
#include "veloxquant/eviction/methods/streaming_llm_cache.h"
#include "veloxquant/eviction/methods/tova_cache.h"
#include "veloxquant/registry/method_rows.h"

namespace veloxquant {

std::vector<MethodDescriptor> eviction_method_rows() {
  return {snapkv_method(),    streaming_llm_method(), h2o_method(),       tova_method(),
          pyramidkv_method(), knorm_method(),         keyformer_method(), kvzip_method(),
          cam_method(),       morphkv_method(),       chunkkv_method(),   qfilters_method(),
          squeeze_method(),   curdkv_method(),        nestedkv_method(),  rocketkv_method()};
}

}  // namespace veloxquant
