#pragma once
// Teaches the host's prompt-cache files (lm/cache/prompt_cache_file.h) the veloxquant serving caches,
// so a prompt processed through a compressed cache can be saved and continued later: each
// servable cache type gets a factory that from_state() then restores from its meta_state.
namespace veloxquant::integration {

// Registers every servable method's cache type (MethodDescriptor::cache_type_name /
// make_restorable) with lm::register_cache_type. Idempotent and thread-safe;
// patch_model_kv_cache and KVCacheBuilder::for_model call it.
void register_prompt_cache_types();

}  // namespace veloxquant::integration
