#pragma once
// Finding a coordinator again after a prompt-cache load. lm::load_prompt_cache rebuilds each
// cache alone (lm::make_cache_of_type + from_state), so the layers of one for_model list would
// come back without the coordinator that tied them. Every for_model call of a cross-layer
// method draws a random wiring id; each layer writes it into its meta_state, and from_state
// looks the id up here: the first layer of a loaded list makes the coordinator, the others
// of the same list join it, and the list continues exactly as the uninterrupted one. Entries
// are weak: a coordinator lives as long as the caches holding it.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace veloxquant::cross_layer {

// A fresh random 63-bit id (never 0; 0 means "not wired").
uint64_t new_wiring_id();

// The live object registered under (kind, id), or make()'s result, registered. Thread-safe.
std::shared_ptr<void> find_or_make_wiring(const std::string& kind, uint64_t id,
                                          const std::function<std::shared_ptr<void>()>& make);

template <class Coordinator, class Make>
std::shared_ptr<Coordinator> shared_wiring(const std::string& kind, uint64_t id, Make make) {
  return std::static_pointer_cast<Coordinator>(
      find_or_make_wiring(kind, id, [&]() -> std::shared_ptr<void> { return make(); }));
}

}  // namespace veloxquant::cross_layer
