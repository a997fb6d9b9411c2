#pragma once
// OpenAI's `stop`: generation ends where the text first contains one of the sequences, and the
// sequence itself is not returned. Text is streamed, so a tail that could still grow into a
// stop sequence is held back until it either completes one or cannot any more.
#include <string>
#include <string_view>
#include <vector>

namespace apps::serve {

class StopMatcher {
 public:
  explicit StopMatcher(std::vector<std::string> stops) : stops_(std::move(stops)) {}

  // Appends generated text; returns what may be sent now. After a stop sequence appeared,
  // stopped() is true and the returned text ends just before it.
  std::string push(std::string_view text);
  // What is still held back (generation ended without a stop sequence).
  std::string flush();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace apps::serve
