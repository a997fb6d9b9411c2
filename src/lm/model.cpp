#include "lm/model.h"

#include "base/error.h"

namespace lm {

void Model::embed_tokens(const std::vector<int32_t>&, float*) const {
  throw base::Unsupported("model '" + config().architecture + "' cannot hand out its input embeddings");
}

void Model::forward_embeddings(const float*, int64_t, CacheList&, std::vector<float>&, std::vector<float>*) const {
  throw base::Unsupported("model '" + config().architecture + "' cannot run from input embeddings");
}

CacheList make_prompt_cache(const Model& model) {
  if (model.make_cache) return model.make_cache();
  return model.native_make_cache();
}

}  // namespace lm
