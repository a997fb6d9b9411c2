// GGUF parsing and model loading on arbitrary bytes: every outcome is a model or a typed
// error (base::Error and std::exception subclasses), never a crash, a hang or a sanitizer report.
#include <cstddef>
#include <cstdint>
#include <exception>

#include "fuzz_input_file.h"
#include "lm/gguf/gguf_file.h"
#include "lm/load.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const fuzz::InputFile file(data, size);
  if (!file.ok()) return 0;
  try {
    const auto gguf = lm::gguf::GgufFile::open(file.path());
    std::size_t bytes = 0;
    for (const auto& t : gguf->tensors()) bytes += t.nbytes;
    (void)bytes;
    lm::LoadOptions options;
    options.context_length = 16;  // the file's own limit may be smaller: then a clean refusal
    (void)lm::load(file.path(), options);
  } catch (const std::exception&) {
  }
  return 0;
}
