#pragma once
// Quality smoke shared by the integration tests: how often a compressed cache leaves the host's
// greedy choice unchanged. For each prompt: the host's full-precision greedy continuation, then
// teacher-forced top-1 agreement — the model re-reads prompt + that continuation through the
// compressed caches one token at a time (the decode path, fused attention where offered), so
// one early divergence does not hide later agreement. The evaluation issue measures properly.
#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "lm/generate.h"
#include "lm/load.h"
#include "veloxquant/veloxquant.h"

namespace veloxquant {

struct Agreement {
  int agree = 0, total = 0, prefix_sum = 0;
  double rate() const { return total ? double(agree) / total : 0.0; }
};

inline std::vector<int32_t> greedy_token_ids(const lm::LoadedModel& m, const std::string& prompt, int n) {
  lm::GenerateOptions o;
  o.max_tokens = n;
  o.temperature = 0.0f;
  std::vector<int32_t> out;
  lm::stream_generate(*m.model, *m.tokenizer, prompt, o, [&](const lm::GenerationChunk& c) {
    if (c.token >= 0) out.push_back(c.token);
    return true;
  });
  return out;
}

inline Agreement measure_agreement(const std::string& model_path, const std::vector<std::string>& prompts, int n,
                                   const KVCacheConfig& config) {
  lm::LoadedModel m = lm::load(model_path);
  Agreement a;
  for (const std::string& prompt : prompts) {
    const std::vector<int32_t> want = greedy_token_ids(m, prompt, n);  // unpatched: host caches
    integration::patch_model_kv_cache(*m.model, config);
    const std::vector<int32_t> got = greedy_token_ids(m, prompt, n);
    std::size_t prefix = 0;
    while (prefix < want.size() && prefix < got.size() && want[prefix] == got[prefix]) ++prefix;
    a.prefix_sum += static_cast<int>(prefix);
    lm::CacheList caches = lm::make_prompt_cache(*m.model);
    std::vector<float> logits;
    m.model->forward(m.tokenizer->encode(prompt, true), caches, logits);
    for (int32_t token : want) {
      const auto argmax = static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
      a.agree += argmax == token;
      ++a.total;
      m.model->forward({token}, caches, logits);
    }
    integration::unpatch_model_kv_cache(*m.model);
  }
  std::printf("%s %s b=%s: top-1 agreement %.3f (%d/%d), mean greedy common prefix %.1f/%d\n",
              model_path.substr(model_path.find_last_of('/') + 1).c_str(), config.method.c_str(),
              config.bit_width_inlier.to_string().c_str(), a.rate(), a.agree, a.total,
              double(a.prefix_sum) / static_cast<double>(prompts.size()), n);
  return a;
}

}  // namespace veloxquant
