#include "veloxquant/cross_layer/wiring_registry.h"

#include <map>
#include <mutex>
#include <random>
#include <utility>

namespace veloxquant::cross_layer {
namespace {

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::pair<std::string, uint64_t>, std::weak_ptr<void>>& registry() {
  static std::map<std::pair<std::string, uint64_t>, std::weak_ptr<void>> r;
  return r;
}

}  // namespace

uint64_t new_wiring_id() {
  static std::mutex m;
  static std::mt19937_64 rng{std::random_device{}()};
  std::lock_guard<std::mutex> lock(m);
  uint64_t id = 0;
  while (id == 0) id = rng() >> 1;  // 63 bits: meta_state parses it as an int64
  return id;
}

std::shared_ptr<void> find_or_make_wiring(const std::string& kind, uint64_t id,
                                          const std::function<std::shared_ptr<void>()>& make) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& entries = registry();
  std::erase_if(entries, [](const auto& entry) { return entry.second.expired(); });
  const auto key = std::make_pair(kind, id);
  if (const auto it = entries.find(key); it != entries.end()) {
    if (std::shared_ptr<void> live = it->second.lock()) return live;
  }
  std::shared_ptr<void> made = make();
  entries[key] = made;
  return made;
}

}  // namespace veloxquant::cross_layer
