// Prompt-cache files on arbitrary bytes: a loaded cache list or a typed error. The file ends
// with a checksum of its other bytes, which rejects nearly every mutant before the parser
// behind it: so most inputs are sealed first (their last 8 bytes replaced by the checksum of
// the rest) and reach the header, shape and count checks; inputs whose length is a multiple of
// 16 stay as they are and keep the checksum path covered.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <vector>

#include "fuzz_input_file.h"
#include "lm/cache/prompt_cache_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  std::vector<uint8_t> bytes(data, data + size);
  if (size >= sizeof(uint64_t) && size % 16 != 0) {
    const uint64_t checksum = lm::prompt_cache_checksum(bytes.data(), size - sizeof checksum);
    std::memcpy(bytes.data() + size - sizeof checksum, &checksum, sizeof checksum);
  }
  const fuzz::InputFile file(bytes.data(), bytes.size());
  if (!file.ok()) return 0;
  try {
    (void)lm::load_prompt_cache(file.path());
  } catch (const std::exception&) {
  }
  return 0;
}
