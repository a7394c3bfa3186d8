// Helpers the client library's source files share (not part of its API).
#pragma once

#include <cstddef>
#include <cstdint>

#include "verbs/app/client.h"

namespace rrdma::verbs::client {

// A sealed memfd of the geometry's size with a fresh ring header: 0 or an errno.
int make_ring(const char* name, RingGeometry geometry, SharedRegion& out);
// A reply's status word as an errno (EPROTO for a value no errno has).
int status_errno(std::uint64_t status);
std::uint32_t handle_word(std::uint64_t word);
// A GID travels as two big-endian words (VERBS_CONTROL.md).
void put_gid(control::Message& message, std::size_t high, std::size_t low, const Gid& gid);
Gid take_gid(const control::Message& message, std::size_t high, std::size_t low);

}  // namespace rrdma::verbs::client
