#include "lm/model.h"

namespace lm {

CacheList make_prompt_cache(const Model& model) {
  if (model.make_cache) return model.make_cache();
  return model.native_make_cache();
}

}  // namespace lm
