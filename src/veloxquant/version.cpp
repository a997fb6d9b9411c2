#include "veloxquant/version.h"
namespace veloxquant {
const char* version() { return "0.1.0"; }
}  // namespace veloxquant
