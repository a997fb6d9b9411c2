#include "veloxquant/cross_layer/wiring_registry.h"

#include <map>
#include <mutex>
#include <random>
#include <set>
#include <utility>

namespace veloxquant::cross_layer {
namespace {

struct Entry {
  std::weak_ptr<void> object;
  std::set<std::pair<int, int>> slots;  // (group_id, member) already joined
};

std::mutex& registry_mutex() {
  static std::mutex m;
  return m;
}
std::map<std::pair<std::string, uint64_t>, Entry>& registry() {
  static std::map<std::pair<std::string, uint64_t>, Entry> r;
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

std::shared_ptr<void> rejoin_wiring(const std::string& kind, uint64_t id, int group_id, int member,
                                    const std::function<std::shared_ptr<void>()>& make) {
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& entries = registry();
  std::erase_if(entries, [](const auto& entry) { return entry.second.object.expired(); });
  const auto slot = std::make_pair(group_id, member);
  Entry& entry = entries[std::make_pair(kind, id)];
  if (std::shared_ptr<void> live = entry.object.lock(); live && entry.slots.insert(slot).second) return live;
  std::shared_ptr<void> made = make();
  entry = Entry{made, {slot}};
  return made;
}

}  // namespace veloxquant::cross_layer
