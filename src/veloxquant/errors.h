#pragma once
// The error veloxquant throws for a configuration it cannot honour. The name and the base class
// are the Python original's public vocabulary (VeloxQuant-MLX raises QuantizerConfigError, a
// ValueError): callers that catch std::invalid_argument keep working. Every message names the
// offending field and its value.
#include <stdexcept>
#include <string>

namespace veloxquant {

class QuantizerConfigError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

}  // namespace veloxquant
