#pragma once
// /metrics for `veloxquant serve`: Prometheus text exposition (version 0.0.4) of the request
// counters kept by the HTTP layer and the engine's live figures (slots, KV bytes, queue,
// prefix pool).
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <utility>

#include "apps/serve/generation_engine.h"

namespace apps::serve {

// HTTP answers by endpoint and status (unknown paths are counted as "other", so a scan of
// random URLs cannot grow the label set).
class RequestCounters {
 public:
  void count(const std::string& endpoint, int status);
  std::map<std::pair<std::string, int>, uint64_t> snapshot() const;

 private:
  mutable std::mutex mutex_;
  std::map<std::pair<std::string, int>, uint64_t> counts_;
};

std::string render_metrics(const EngineSnapshot& engine,
                           const std::map<std::pair<std::string, int>, uint64_t>& requests);

}  // namespace apps::serve
