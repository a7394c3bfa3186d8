// The Internet checksum (RFC 1071) and the ICMP token bucket: small pure pieces.
#include <catch2/catch.hpp>

#include <vector>

#include "stack/checksum.h"
#include "stack/token_bucket.h"

namespace rrdma::stack {

TEST_CASE("Internet checksum: the RFC 1071 section 3 example", "[checksum]") {
  // RFC 1071 3: bytes 00 01 f2 03 f4 f5 f6 f7 sum to ddf2 (after the end-around carry).
  const std::vector<std::uint8_t> bytes{0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7};
  CHECK(internet_checksum(bytes) == static_cast<std::uint16_t>(~0xddf2));
}

TEST_CASE("Internet checksum: odd lengths pad with zero, split spans join seamlessly",
          "[checksum]") {
  const std::vector<std::uint8_t> odd{0x12, 0x34, 0x56};
  CHECK(internet_checksum(odd) == static_cast<std::uint16_t>(~(0x1234 + 0x5600)));

  std::vector<std::uint8_t> bytes(101);
  for (std::size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<std::uint8_t>(i * 37 + 11);
  const std::uint16_t whole = internet_checksum(bytes);
  for (std::size_t cut = 0; cut <= bytes.size(); ++cut) {
    INFO("cut at " << cut);
    InternetChecksum sum;
    sum.add(ByteSpan(bytes).first(cut));
    sum.add(ByteSpan(bytes).subspan(cut));
    CHECK(sum.finish() == whole);
  }
}

TEST_CASE("Internet checksum: a buffer with its checksum inserted sums to zero", "[checksum]") {
  std::vector<std::uint8_t> bytes{0x45, 0x00, 0x00, 0x54, 0xab, 0xcd, 0x40, 0x00, 0x40, 0x01,
                                  0x00, 0x00, 0x0a, 0x63, 0x00, 0x02, 0x0a, 0x63, 0x00, 0x01};
  store_be16(bytes, 10, internet_checksum(bytes));
  CHECK(internet_checksum(bytes) == 0);
}

TEST_CASE("token bucket: burst, then one token per interval", "[token_bucket]") {
  using std::chrono::milliseconds;
  const Instant t0{};
  TokenBucket bucket(2, milliseconds(100));
  CHECK(bucket.try_take(t0));
  CHECK(bucket.try_take(t0));
  CHECK_FALSE(bucket.try_take(t0));
  CHECK_FALSE(bucket.try_take(t0 + milliseconds(99)));
  CHECK(bucket.try_take(t0 + milliseconds(100)));
  // The partial token's progress is kept: 250 ms after t0 is 1.5 intervals after the refill.
  CHECK(bucket.try_take(t0 + milliseconds(250)));
  CHECK(bucket.try_take(t0 + milliseconds(300)));
  CHECK_FALSE(bucket.try_take(t0 + milliseconds(300)));
  // Time going backwards (a caller bug) neither crashes nor mints tokens.
  CHECK_FALSE(bucket.try_take(t0));
  // A long pause refills to the burst only.
  CHECK(bucket.try_take(t0 + std::chrono::hours(1)));
  CHECK(bucket.try_take(t0 + std::chrono::hours(1)));
  CHECK_FALSE(bucket.try_take(t0 + std::chrono::hours(1)));
}

}  // namespace rrdma::stack
