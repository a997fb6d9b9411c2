// A chat template is untrusted text from a model file: parsing and rendering any bytes must end
// in a rendered prompt or one of the project's errors (base::FormatError for malformed
// templates or evaluation errors, base::Unsupported for constructs the interpreter lacks and
// the template's raise_exception) - never a crash, another exception, or unbounded work.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <ctime>
#include <string>

#include "base/error.h"
#include "lm/tokenizer/chat_template.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, std::size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  lm::ChatTemplateOptions options;
  options.bos_token = "<s>";
  options.eos_token = "</s>";
  options.now = [] { return std::time_t{1768478400}; };
  try {
    const lm::ChatTemplate chat_template(text);
    for (bool add_generation_prompt : {true, false}) {
      options.add_generation_prompt = add_generation_prompt;
      (void)chat_template.render({{"system", "Be brief."}, {"user", "Hi"}, {"assistant", "Hello!"}, {"user", "Bye"}},
                                 options);
    }
  } catch (const base::FormatError&) {
  } catch (const base::Unsupported&) {
  } catch (...) {
    std::abort();  // any other exception escaping is a bug
  }
  return 0;
}
