#pragma once
// Finding a coordinator again after a prompt-cache load. lm::load_prompt_cache rebuilds each
// cache alone (lm::make_cache_of_type + from_state), so the layers of one for_model list would
// come back without the coordinator that tied them. Every for_model call of a cross-layer
// method draws a random wiring id; each layer writes it and its slot (group_id, member) into
// its meta_state, and from_state calls rejoin_wiring: the first layer of a loaded list makes a
// coordinator, the others of the same list join it, and the list continues exactly as the
// uninterrupted one. A slot already taken means a second load of the same list: it starts a
// coordinator of its own, so two loaded copies never read each other's segments. (The live
// for_model list is not registered at all.) Entries are weak: a coordinator lives as long as
// the caches holding it.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>

namespace veloxquant::cross_layer {

// A fresh random 63-bit id (never 0; 0 means "not wired").
uint64_t new_wiring_id();

// The object the layer in slot (group_id, member) of wiring (kind, id) joins. Thread-safe.
std::shared_ptr<void> rejoin_wiring(const std::string& kind, uint64_t id, int group_id, int member,
                                    const std::function<std::shared_ptr<void>()>& make);

template <class Coordinator, class Make>
std::shared_ptr<Coordinator> rejoin_coordinator(const std::string& kind, uint64_t id, int group_id, int member,
                                                Make make) {
  return std::static_pointer_cast<Coordinator>(
      rejoin_wiring(kind, id, group_id, member, [&]() -> std::shared_ptr<void> { return make(); }));
}

}  // namespace veloxquant::cross_layer
