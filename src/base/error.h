#pragma once
// Errors every layer of the project throws. User input is validated at the front door and
// rejected with one of these, carrying a message that names the offending value; `assert`
// is kept for internal invariants only.
#include <stdexcept>
#include <string>

namespace base {

// A file that is missing, unreadable, truncated or not in the format it claims to be.
class FormatError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A value given by the user (flag, option, argument) that is out of range or meaningless.
class InvalidArgument : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// Something valid that this build does not implement (a tensor type, an architecture).
class Unsupported : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

}  // namespace base
