#pragma once
namespace veloxquant {
// The library's version string, e.g. "0.1.0".
const char* version();
}  // namespace veloxquant
