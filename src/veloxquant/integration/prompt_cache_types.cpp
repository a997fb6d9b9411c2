#include "veloxquant/integration/prompt_cache_types.h"

#include <mutex>

#include "lm/cache/prompt_cache_file.h"
#include "veloxquant/registry/method_registry.h"

namespace veloxquant::integration {

void register_prompt_cache_types() {
  static std::once_flag once;
  std::call_once(once, [] {
    // Every servable method's registration says which type name its caches report and how to
    // make a placeholder that from_state() fills; several methods may share one type name.
    for (const MethodDescriptor& method : method_registry()) {
      if (method.make_restorable) lm::register_cache_type(method.cache_type_name, method.make_restorable);
    }
  });
}

}  // namespace veloxquant::integration
