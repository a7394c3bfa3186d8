// printf-style appending for the one-line descriptions of packets and messages (`describe`):
// <format> is not in g++ 12's library.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <string>

namespace rrdma::rocev2 {

// Appends at most 95 characters: enough for any one field of a trace line.
template <typename... Args>
void append(std::string& out, const char* format, Args... args) {
  char buf[96];
  const int n = std::snprintf(buf, sizeof buf, format, args...);
  if (n > 0) out.append(buf, std::min(static_cast<std::size_t>(n), sizeof buf - 1));
}

}  // namespace rrdma::rocev2
