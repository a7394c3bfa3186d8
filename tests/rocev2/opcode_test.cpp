// The opcode table (rocev2/opcode.h) against the captures and IBA table 38.
#include <catch2/catch.hpp>

#include <map>
#include <set>

#include "rocev2/opcode.h"
#include "tests/rocev2/rxe_captures.h"

namespace rrdma::rocev2 {
namespace {

using F = OpcodeFlags;

TEST_CASE("Opcodes seen in the rxe captures have the flags IBA table 38 gives them", "[opcode]") {
  // opcode -> (headers after the BTH, other bits that must be set)
  const std::map<int, std::pair<std::uint32_t, std::uint32_t>> expected{
      {0x00, {0, F::kRc | F::kRequest | F::kSend | F::kStart | F::kPayload}},
      {0x01, {0, F::kRc | F::kRequest | F::kSend | F::kMiddle | F::kPayload}},
      {0x02, {0, F::kRc | F::kRequest | F::kSend | F::kEnd | F::kPayload}},
      {0x06, {F::kReth, F::kRc | F::kRequest | F::kWrite | F::kStart | F::kPayload}},
      {0x07, {0, F::kRc | F::kRequest | F::kWrite | F::kMiddle | F::kPayload}},
      {0x08, {0, F::kRc | F::kRequest | F::kWrite | F::kEnd | F::kPayload}},
      {0x0C, {F::kReth, F::kRc | F::kRequest | F::kReadRequest | F::kStart | F::kEnd}},
      {0x0D, {F::kAeth, F::kRc | F::kResponse | F::kReadResponse | F::kStart | F::kPayload}},
      {0x0E, {0, F::kRc | F::kResponse | F::kReadResponse | F::kMiddle | F::kPayload}},
      {0x0F, {F::kAeth, F::kRc | F::kResponse | F::kReadResponse | F::kEnd | F::kPayload}},
      {0x11, {F::kAeth, F::kRc | F::kResponse | F::kAck}},
      {0x12, {F::kAeth | F::kAtomicAckEth, F::kRc | F::kResponse | F::kAtomicAck}},
      {0x13, {F::kAtomicEth, F::kRc | F::kRequest | F::kAtomic}},
      {0x14, {F::kAtomicEth, F::kRc | F::kRequest | F::kAtomic}},
      {0x20, {0, F::kUc | F::kRequest | F::kSend | F::kStart | F::kPayload}},
      {0x22, {0, F::kUc | F::kRequest | F::kSend | F::kEnd | F::kPayload}},
      {0x64, {F::kDeth, F::kUd | F::kRequest | F::kSend | F::kStart | F::kEnd | F::kPayload}},
  };
  constexpr std::uint32_t kHeaderBits =
      F::kDeth | F::kReth | F::kAtomicEth | F::kAeth | F::kAtomicAckEth | F::kImm | F::kIeth | F::kFeth;
  std::set<int> seen;
  for (const test::RxeFrame& f : test::all_rxe_frames()) {
    const test::Layers l = test::split_layers(f.bytes);
    seen.insert(l.udp_payload[0]);
  }
  CHECK(seen.size() == expected.size());
  for (int op : seen) {
    INFO("opcode " << op);
    REQUIRE(expected.count(op) == 1);
    const OpcodeInfo info = opcode_info(static_cast<Opcode>(op));
    CHECK(info.flags.has(F::kValid));
    CHECK((info.flags.bits() & kHeaderBits) == expected.at(op).first);
    CHECK(info.flags.has_all(expected.at(op).second));
    CHECK(info.name != "UNKNOWN");
  }
}

TEST_CASE("Exactly the opcodes of IBA table 38 (RC, UC, UD), the 1.5 extensions and CNP are valid", "[opcode]") {
  std::set<int> valid;
  for (int op = 0; op < 256; ++op)
    if (is_valid(static_cast<Opcode>(op))) valid.insert(op);
  std::set<int> expected;
  for (int op = 0x00; op <= 0x14; ++op) expected.insert(op);
  expected.insert({0x16, 0x17, 0x1C, 0x1D});
  for (int op = 0x20; op <= 0x2B; ++op) expected.insert(op);
  expected.insert({0x64, 0x65, 0x81});
  CHECK(valid == expected);
  for (int op = 0; op < 256; ++op) {
    if (valid.count(op)) continue;
    const OpcodeInfo info = opcode_info(static_cast<Opcode>(op));
    CHECK(info.name == "UNKNOWN");
    CHECK(info.flags.bits() == 0);
  }
}

TEST_CASE("Every valid opcode is exactly one of request, response or CNP, with one transport", "[opcode]") {
  for (int op = 0; op < 256; ++op) {
    const OpcodeInfo info = opcode_info(static_cast<Opcode>(op));
    if (!info.flags.has(F::kValid)) continue;
    INFO(info.name);
    const int transports = info.flags.has(F::kRc) + info.flags.has(F::kUc) + info.flags.has(F::kUd) + info.flags.has(F::kCnp);
    CHECK(transports == 1);
    const int roles = info.flags.has(F::kRequest) + info.flags.has(F::kResponse) + info.flags.has(F::kCnp);
    CHECK(roles == 1);
    CHECK(info.header_length % 4 == 0);
    CHECK(info.name.substr(0, 3) == (info.flags.has(F::kRc) ? "RC " : info.flags.has(F::kUc) ? "UC " : info.flags.has(F::kUd) ? "UD " : "CNP"));
  }
}

}  // namespace
}  // namespace rrdma::rocev2

namespace rrdma::rocev2 {
namespace {

// Header lengths of every valid opcode, from the table in PROTOCOL.md (IBA table 38 and
// the 1.5 extensions), written out independently of opcode.h's flag arithmetic.
TEST_CASE("Header length of every valid opcode matches the PROTOCOL.md table", "[opcode]") {
  constexpr std::size_t B = 12, R = 16, A = 4, At = 28, AA = 8, D = 8, I = 4, Ie = 4, Fe = 4;
  const std::map<int, std::size_t> connected{
      {0x00, B},         {0x01, B},          {0x02, B},      {0x03, B + I},     {0x04, B},
      {0x05, B + I},     {0x06, B + R},      {0x07, B},      {0x08, B},         {0x09, B + I},
      {0x0A, B + R},     {0x0B, B + R + I},  {0x0C, B + R},  {0x0D, B + A},     {0x0E, B},
      {0x0F, B + A},     {0x10, B + A},      {0x11, B + A},  {0x12, B + A + AA}, {0x13, B + At},
      {0x14, B + At},    {0x16, B + Ie},     {0x17, B + Ie}, {0x1C, B + Fe + R}, {0x1D, B + R}};
  std::size_t checked = 0;
  for (const auto& [op, length] : connected) {
    INFO("opcode " << op);
    CHECK(opcode_info(static_cast<Opcode>(op)).header_length == length);
    ++checked;
    if (op <= 0x0B) {  // UC has the SEND and RDMA WRITE rows
      CHECK(opcode_info(static_cast<Opcode>(0x20 | op)).header_length == length);
      ++checked;
    }
  }
  CHECK(opcode_info(Opcode::UdSendOnly).header_length == B + D);
  CHECK(opcode_info(Opcode::UdSendOnlyImm).header_length == B + D + I);
  CHECK(opcode_info(Opcode::Cnp).header_length == B);
  CHECK(checked + 3 == 40);  // every valid opcode
}

}  // namespace
}  // namespace rrdma::rocev2
