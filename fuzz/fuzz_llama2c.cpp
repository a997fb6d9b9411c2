// llama2.c checkpoints on arbitrary bytes: a checkpoint or a typed error, nothing else.
#include <cstddef>
#include <cstdint>
#include <exception>

#include "fuzz_input_file.h"
#include "lm/llama2c/llama2c_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const fuzz::InputFile file(data, size);
  if (!file.ok()) return 0;
  try {
    (void)lm::read_llama2c_checkpoint(file.path());
  } catch (const std::exception&) {
  }
  return 0;
}
