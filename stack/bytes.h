// Big-endian loads and stores over byte spans: the only way wire code touches bytes.
// No packed structs, no casts of buffers to structs (see ../shared/STYLE.md). Callers
// check lengths first (each header view's checked constructor does); these helpers
// assert the span is long enough in debug builds only.
#pragma once

#include <cassert>
#include <cstddef>
#include <cstdint>
#include <span>

namespace rrdma {

using ByteSpan = std::span<const std::uint8_t>;
using MutableByteSpan = std::span<std::uint8_t>;

constexpr std::uint16_t load_be16(ByteSpan b, std::size_t at) {
  assert(at + 2 <= b.size());
  return static_cast<std::uint16_t>((b[at] << 8) | b[at + 1]);
}
constexpr std::uint32_t load_be24(ByteSpan b, std::size_t at) {
  assert(at + 3 <= b.size());
  return (std::uint32_t{b[at]} << 16) | (std::uint32_t{b[at + 1]} << 8) | b[at + 2];
}
constexpr std::uint32_t load_be32(ByteSpan b, std::size_t at) {
  assert(at + 4 <= b.size());
  return (std::uint32_t{b[at]} << 24) | (std::uint32_t{b[at + 1]} << 16) |
         (std::uint32_t{b[at + 2]} << 8) | b[at + 3];
}
constexpr std::uint64_t load_be64(ByteSpan b, std::size_t at) {
  return (std::uint64_t{load_be32(b, at)} << 32) | load_be32(b, at + 4);
}

// The big-endian number in the `n` bytes (1 to 8) at `at`: for fields of widths the fixed-size
// loads above do not cover (a 20-bit flow label spread over three bytes, say).
constexpr std::uint64_t load_be(ByteSpan b, std::size_t at, std::size_t n) {
  assert(n >= 1 && n <= 8 && at + n <= b.size());
  std::uint64_t v = 0;
  for (std::size_t i = 0; i < n; ++i) v = (v << 8) | b[at + i];
  return v;
}

constexpr void store_be16(MutableByteSpan b, std::size_t at, std::uint16_t v) {
  assert(at + 2 <= b.size());
  b[at] = static_cast<std::uint8_t>(v >> 8);
  b[at + 1] = static_cast<std::uint8_t>(v);
}
constexpr void store_be24(MutableByteSpan b, std::size_t at, std::uint32_t v) {
  assert(at + 3 <= b.size());
  b[at] = static_cast<std::uint8_t>(v >> 16);
  b[at + 1] = static_cast<std::uint8_t>(v >> 8);
  b[at + 2] = static_cast<std::uint8_t>(v);
}
constexpr void store_be32(MutableByteSpan b, std::size_t at, std::uint32_t v) {
  assert(at + 4 <= b.size());
  b[at] = static_cast<std::uint8_t>(v >> 24);
  b[at + 1] = static_cast<std::uint8_t>(v >> 16);
  b[at + 2] = static_cast<std::uint8_t>(v >> 8);
  b[at + 3] = static_cast<std::uint8_t>(v);
}
constexpr void store_be64(MutableByteSpan b, std::size_t at, std::uint64_t v) {
  store_be32(b, at, static_cast<std::uint32_t>(v >> 32));
  store_be32(b, at + 4, static_cast<std::uint32_t>(v));
}

// The low 8n bits of `v` as `n` bytes (1 to 8), big-endian, at `at`.
constexpr void store_be(MutableByteSpan b, std::size_t at, std::size_t n, std::uint64_t v) {
  assert(n >= 1 && n <= 8 && at + n <= b.size());
  for (std::size_t i = n; i-- > 0; v >>= 8) b[at + i] = static_cast<std::uint8_t>(v);
}

}  // namespace rrdma
