// Prompt-cache files on arbitrary bytes: a loaded cache list or a typed error. The file carries a
// checksum, so most mutations stop there; the seed corpus holds valid files to mutate from.
#include <cstddef>
#include <cstdint>
#include <exception>

#include "fuzz_input_file.h"
#include "lm/cache/prompt_cache_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const fuzz::InputFile file(data, size);
  if (!file.ok()) return 0;
  try {
    (void)lm::load_prompt_cache(file.path());
  } catch (const std::exception&) {
  }
  return 0;
}
