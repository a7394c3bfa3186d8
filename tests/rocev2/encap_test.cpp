// RoCE v2 encapsulation: the UDP source port rule against the captures, whole frames built
// and parsed, every rxe frame rebuilt byte for byte, and hostile frames.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "rocev2/encap.h"
#include "rocev2/icrc.h"
#include "stack/checksum.h"
#include "tests/rocev2/rxe_captures.h"

namespace rrdma::rocev2 {
namespace {

using Bytes = std::vector<std::uint8_t>;

constexpr std::size_t kUdpChecksumAt = 14 + 20 + 6;
constexpr std::size_t kBthEcnAt = 14 + 20 + 8 + 4;

TEST_CASE("Source port: the rxe captures use the rxe formulas", "[encap][golden]") {
  // Both hosts' QPs were QPN 0x11 in every capture (tshark: DestQP 0x000011, DETH src QP 0x11).
  for (const test::RxeFrame& f : test::all_rxe_frames()) {
    INFO(f.capture << " frame " << f.index + 1);
    RoceFrame r;
    REQUIRE(parse_frame(f.bytes, r).ok());
    const std::uint16_t port = r.headers.udp.source_port;
    if (r.packet.deth) {
      CHECK(port == udp_source_port_datagram(r.packet.deth->src_qp));
    } else {
      CHECK(port == udp_source_port_connected(Qpn{0x11}, r.packet.bth.dest_qp));
    }
  }
  CHECK(udp_source_port_connected(Qpn{0x11}, Qpn{0x11}) == 49441);  // rc_pingpong's port
  CHECK(udp_source_port_datagram(Qpn{0x11}) == 57236);             // ud_pingpong's port
}

TEST_CASE("Source port: same both ways for a QP pair, always in 0xC000-0xFFFF", "[encap]") {
  std::mt19937 rng(1);
  for (int i = 0; i < 10000; ++i) {
    const Qpn a{static_cast<std::uint32_t>(rng())}, b{static_cast<std::uint32_t>(rng())};
    const std::uint16_t p = udp_source_port_connected(a, b);
    CHECK(p == udp_source_port_connected(b, a));
    CHECK(p >= 0xC000);
    CHECK(udp_source_port_datagram(a) >= 0xC000);
  }
  // The AH's flow label wins over the QP pair's; label bits 14-19 fold onto bits 0-5.
  CHECK(udp_source_port_connected(Qpn{1}, Qpn{2}, 0x0C005) == (0xC000 | (0x0005 ^ 0x3)));
  CHECK(flow_label_for(Qpn{0x100000}, Qpn{0x100000}) == ((0x10000000000ull ^ (0x10000000000ull >> 20) ^
                                                          (0x10000000000ull >> 40)) & 0xFFFFF));
}

TEST_CASE("Golden: every rxe frame parses, verifies, and is rebuilt byte for byte", "[encap][golden]") {
  for (const test::RxeFrame& f : test::all_rxe_frames()) {
    INFO(f.capture << " frame " << f.index + 1);
    RoceFrame r;
    const RoceFrameCheck c = parse_frame(f.bytes, r);
    REQUIRE(c.error == FrameError::none);
    CHECK(r.headers.ipv4.ttl == 64);
    CHECK(r.headers.ipv4.dscp == 0);
    CHECK(r.headers.ipv4.ecn == 0);
    CHECK(r.headers.ipv4.dont_fragment);
    CHECK(r.headers.udp.destination_port == 4791);
    CHECK(f.bytes[kUdpChecksumAt] == 0);
    CHECK(f.bytes[kUdpChecksumAt + 1] == 0);
    CHECK_FALSE(r.packet.bth.mig_req);
    CHECK(r.ipv4_header.data() == f.bytes.data() + 14);
    CHECK(r.ipv4_header.size() == 20);
    REQUIRE(frame_length(r.packet) == f.bytes.size());
    Bytes out(f.bytes.size(), 0xEE);
    REQUIRE(build_frame(r.headers, r.packet, out) == EmitError::none);
    CHECK(out == f.bytes);
  }
}

TEST_CASE("The ConnectX-4 Lx CNP parses as a frame", "[encap]") {
  const Bytes cnp{0xe4, 0x1d, 0x2d, 0xab, 0x2b, 0xc2, 0x7c, 0xfe, 0x90, 0x64, 0x3b, 0x32, 0x08, 0x00, 0x45, 0xc2,
                  0x00, 0x3c, 0x71, 0x8c, 0x40, 0x00, 0x40, 0x11, 0x91, 0x61, 0x0a, 0x00, 0x11, 0x01, 0x0a, 0x00,
                  0x12, 0x01, 0x00, 0x00, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, 0x81, 0x00, 0xff, 0xff, 0x40, 0x00,
                  0x01, 0x18, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00,
                  0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x82, 0xfd, 0x00, 0x2a};
  RoceFrame r;
  REQUIRE(parse_frame(cnp, r).ok());
  CHECK(r.packet.bth.opcode == Opcode::Cnp);
  CHECK(r.packet.bth.becn);
  CHECK(r.packet.bth.dest_qp == Qpn{0x118});
  CHECK(r.packet.payload.size() == kCnpPayloadLength);
  CHECK(r.headers.udp.source_port == 0);  // ConnectX-4 Lx CNPs do not use the 0xC000 range
  CHECK(r.headers.ipv4.dscp == 0x30);     // DSCP 48, ECN 2: a CNP priority, set by the NIC
  CHECK(r.icrc == 0x2a00fd82);
  // Rebuilt from the parsed values, it is the NIC's frame byte for byte: our emitter
  // produces a hardware CNP as well as rxe's packets.
  Bytes out(frame_length(r.packet));
  REQUIRE(build_frame(r.headers, r.packet, out) == EmitError::none);
  CHECK(out == cnp);
}

RoceHeaders test_headers() {
  return roce_headers(stack::MacAddress{{2, 0, 0, 0, 0, 1}}, stack::MacAddress{{2, 0, 0, 0, 0, 2}},
                      stack::Ipv4Address{0x0A320001}, stack::Ipv4Address{0x0A320002},
                      udp_source_port_connected(Qpn{0x12}, Qpn{0x34}), 7);
}

TEST_CASE("build_frame: RoCE v2 header values, then parse_frame gives the packet back", "[encap]") {
  const Bytes payload{1, 2, 3, 4, 5, 6, 7};
  TransportPacket p;
  p.bth.opcode = Opcode::RcSendOnlyImm;
  p.bth.dest_qp = Qpn{0x34};
  p.bth.psn = Psn{0xFFFFFF};
  p.bth.ack_req = true;
  p.imm = ImmDt{0x11223344};
  p.payload = payload;  // pad_count left 0: the frame builder derives it
  Bytes out(frame_length(p));
  REQUIRE(out.size() == 14 + 20 + 8 + 12 + 4 + 7 + 1 + 4);
  REQUIRE(build_frame(test_headers(), p, out) == EmitError::none);

  CHECK(out[12] == 0x08);
  CHECK(out[13] == 0x00);
  CHECK(out[14] == 0x45);
  CHECK(out[15] == 0x00);                           // TOS 0
  CHECK(load_be16(out, 16) == out.size() - 14);     // IPv4 total length
  CHECK(load_be16(out, 18) == 7);                   // identification
  CHECK(load_be16(out, 20) == 0x4000);              // DF, offset 0
  CHECK(out[22] == 64);                             // TTL
  CHECK(out[23] == 17);                             // UDP
  CHECK(load_be16(out, 34) == udp_source_port_connected(Qpn{0x12}, Qpn{0x34}));
  CHECK(load_be16(out, 36) == 4791);
  CHECK(load_be16(out, 38) == out.size() - 34);     // UDP length
  CHECK(load_be16(out, 40) == 0);                   // UDP checksum
  CHECK(((out[43] >> 4) & 3) == 1);                 // PadCnt
  CHECK(out[out.size() - 5] == 0);                  // the pad byte

  RoceFrame r;
  REQUIRE(parse_frame(out, r).ok());
  CHECK(r.packet.bth.pad_count == 1);
  CHECK(r.packet.imm == p.imm);
  CHECK(Bytes(r.packet.payload.begin(), r.packet.payload.end()) == payload);
  CHECK(r.headers.ipv4.ttl == 64);
  CHECK(r.headers.ipv4.dont_fragment);
  CHECK(r.headers.ethernet == test_headers().ethernet);
  CHECK(verify_icrc(ByteSpan(out).subspan(14)) == IcrcError::none);
}

// The address vector's traffic class is the IPv4 TOS byte, DSCP and ECN as given (rxe's
// prepare4); the ICRC masks the TOS (icrc.h), so it is the ICRC of the same packet
// sent with TOS 0, and a frame of UCX's class 106 parses back to DSCP 26, ECT(0).
TEST_CASE("build_frame: the traffic class is the IPv4 TOS, which the ICRC does not cover", "[encap]") {
  STATIC_REQUIRE(ipv4_tos(0x6a).dscp == 26);
  STATIC_REQUIRE(ipv4_tos(0x6a).ecn == 2);
  STATIC_REQUIRE(ipv4_tos(0xff).dscp == 63);
  STATIC_REQUIRE(ipv4_tos(0xff).ecn == 3);
  const Bytes payload{9, 8, 7};
  TransportPacket p;
  p.bth.opcode = Opcode::RcSendOnly;
  p.bth.dest_qp = Qpn{0x34};
  p.bth.psn = Psn{5};
  p.payload = payload;
  const RoceHeaders plain = test_headers();
  Bytes without(frame_length(p));
  REQUIRE(build_frame(plain, p, without) == EmitError::none);
  for (const std::uint8_t traffic_class : std::initializer_list<std::uint8_t>{0x6a, 0x01, 0xb8, 0xff}) {
    const RoceHeaders h = roce_headers(plain.ethernet.source, plain.ethernet.destination, plain.ipv4.source,
                                       plain.ipv4.destination, plain.udp.source_port, 7, traffic_class);
    Bytes with(frame_length(p));
    REQUIRE(build_frame(h, p, with) == EmitError::none);
    CHECK(with[15] == traffic_class);
    RoceFrame r;
    REQUIRE(parse_frame(with, r).ok());
    CHECK(((r.headers.ipv4.dscp << 2) | r.headers.ipv4.ecn) == traffic_class);
    // Only the TOS and the IPv4 header checksum differ from the frame with TOS 0: the ICRC,
    // the last 4 bytes, is the same.
    for (std::size_t i = 0; i < with.size(); ++i)
      if (i != 15 && i != 24 && i != 25) CHECK(with[i] == without[i]);
  }
}

TEST_CASE("Junk in the buffer: build_frame writes every byte, pad and ICRC included", "[encap]") {
  for (std::size_t len : {0u, 1u, 2u, 3u, 4u, 1023u, 1024u}) {
    Bytes payload(len);
    for (std::size_t i = 0; i < len; ++i) payload[i] = static_cast<std::uint8_t>(i * 7);
    TransportPacket p;
    p.bth.opcode = Opcode::RcWriteOnly;
    p.reth = Reth{0x1000, Rkey{0x42}, static_cast<std::uint32_t>(len)};
    p.payload = payload;
    Bytes whole(frame_length(p));
    REQUIRE(build_frame(test_headers(), p, whole) == EmitError::none);

    Bytes junk(frame_length(p), 0xEE);  // junk where the pad goes, as in a reused transmit slot
    REQUIRE(build_frame(test_headers(), p, junk) == EmitError::none);
    CHECK(junk == whole);
  }
}

TEST_CASE("seal_frame refuses frames too short for headers, pad and ICRC", "[encap][hostile]") {
  TransportPacket p;
  p.bth.opcode = Opcode::RcSendOnly;
  const Bytes payload(5, 9);
  p.payload = payload;
  Bytes f(frame_length(p));
  REQUIRE(build_frame(test_headers(), p, f) == EmitError::none);  // PadCnt 3
  const Bytes original = f;
  for (std::size_t n = 0; n < 14 + 20 + 8 + 12 + 3 + 4; ++n) {
    Bytes cut(f.begin(), f.begin() + static_cast<std::ptrdiff_t>(n));
    CHECK_FALSE(seal_frame(cut));
    CHECK(std::equal(cut.begin(), cut.end(), original.begin()));
  }
  CHECK(seal_frame(f));
  CHECK(f == original);
}

TEST_CASE("build_frame refuses what it cannot send", "[encap]") {
  TransportPacket p;
  p.bth.opcode = Opcode::RcSendOnly;
  Bytes out(100);
  CHECK(build_frame(test_headers(), p, std::span(out).first(frame_length(p) - 1)) == EmitError::buffer_too_small);
  p.bth.opcode = Opcode::RcAck;
  CHECK(build_frame(test_headers(), p, out) == EmitError::missing_header);
  p.bth.opcode = static_cast<Opcode>(0x1E);
  CHECK(build_frame(test_headers(), p, out) == EmitError::unknown_opcode);
  const Bytes huge(65535 - 20 - 8 - 12 - 4 + 1);
  p.bth.opcode = Opcode::RcSendOnly;
  p.payload = huge;
  CHECK(build_frame(test_headers(), p, out) == EmitError::too_long);
}

TEST_CASE("A flipped bit anywhere past the Ethernet header is refused, except in masked unchecked fields",
          "[encap]") {
  for (const char* name : test::kRxeCaptures) {
    Bytes f = test::rxe_frame(name, 2);
    INFO(name);
    RoceFrame r;
    REQUIRE(parse_frame(f, r).ok());
    for (std::size_t at = 14; at < f.size(); ++at) {
      for (int b = 0; b < 8; ++b) {
        f[at] ^= static_cast<std::uint8_t>(1u << b);
        const RoceFrameCheck c = parse_frame(f, r);
        f[at] ^= static_cast<std::uint8_t>(1u << b);
        INFO("byte " << at << " bit " << b << ": " << to_string(c.error));
        // The UDP checksum is neither checked nor in the ICRC; FECN/BECN/reserved only masked.
        const bool harmless = at == kUdpChecksumAt || at == kUdpChecksumAt + 1 || at == kBthEcnAt;
        REQUIRE(c.ok() == harmless);
      }
    }
  }
}

// Rewrites a field of a good frame and fixes the IPv4 header checksum, so that only the
// rewritten field is wrong.
Bytes with_ipv4_field(Bytes f, std::size_t at, std::uint8_t value) {
  f[at] = value;
  f[14 + 10] = f[14 + 11] = 0;
  store_be16(f, 14 + 10, stack::internet_checksum(ByteSpan(f).subspan(14, 20)));
  return f;
}

TEST_CASE("parse_frame names the layer that is wrong", "[encap][hostile]") {
  const Bytes good = test::rxe_frame("rxe_write_bw.pcapng", 51);  // an ACK
  RoceFrame r;
  REQUIRE(parse_frame(good, r).ok());
  auto error_of = [&](const Bytes& f) { return parse_frame(f, r).error; };

  Bytes arp = good;
  arp[12] = 0x08, arp[13] = 0x06;
  CHECK(error_of(arp) == FrameError::not_ipv4);
  CHECK(error_of(with_ipv4_field(good, 14, 0x65)) == FrameError::bad_ipv4);         // version 6
  Bytes bad_sum = good;
  bad_sum[14 + 11] ^= 1;
  CHECK(error_of(bad_sum) == FrameError::bad_ipv4_checksum);
  CHECK(error_of(with_ipv4_field(good, 14 + 6, 0x60)) == FrameError::ipv4_fragment);  // DF + MF
  CHECK(error_of(with_ipv4_field(good, 14 + 9, 6)) == FrameError::not_udp);          // TCP
  Bytes long_udp = good;
  store_be16(long_udp, 14 + 20 + 4, static_cast<std::uint16_t>(good.size() - 14 - 20 + 1));
  CHECK(error_of(long_udp) == FrameError::bad_udp);
  Bytes port = good;
  store_be16(port, 14 + 20 + 2, 4792);
  CHECK(error_of(port) == FrameError::not_roce_port);
  Bytes corrupt = good;
  corrupt[corrupt.size() - 5] ^= 0x10;  // MSN
  CHECK(error_of(corrupt) == FrameError::bad_icrc);
  Bytes unknown = good;
  unknown[14 + 20 + 8] = 0x1F;
  REQUIRE(seal_frame(unknown));
  const RoceFrameCheck c = parse_frame(unknown, r);
  CHECK(c.error == FrameError::bad_transport);
  CHECK(c.transport == TransportError::unknown_opcode);
}

TEST_CASE("Hostile: a lying pad count with a valid ICRC is refused", "[encap][hostile]") {
  TransportPacket ack;
  ack.bth.opcode = Opcode::RcAck;
  ack.aeth = Aeth{0x1F, Msn{1}};
  Bytes f(frame_length(ack));
  REQUIRE(build_frame(test_headers(), ack, f) == EmitError::none);
  f[14 + 20 + 8 + 1] |= 0x30;  // PadCnt 3 with no payload
  REQUIRE(seal_frame(f));      // a sender that lies consistently
  RoceFrame r;
  const RoceFrameCheck c = parse_frame(f, r);
  CHECK(c.error == FrameError::bad_transport);
  CHECK(c.transport == TransportError::bad_pad_count);
}

TEST_CASE("Hostile: every truncation of every rxe frame is refused", "[encap][hostile]") {
  for (const test::RxeFrame& f : test::all_rxe_frames()) {
    for (std::size_t n = 0; n < f.bytes.size(); ++n) {
      const Bytes cut(f.bytes.begin(), f.bytes.begin() + static_cast<std::ptrdiff_t>(n));
      RoceFrame r;
      const RoceFrameCheck c = parse_frame(cut, r);
      REQUIRE_FALSE(c.ok());
      REQUIRE(c.error == (n < 14 ? FrameError::not_ipv4 : FrameError::bad_ipv4));
    }
  }
}

TEST_CASE("Hostile: mutated rxe frames and random bytes never escape their buffer", "[encap][hostile]") {
  std::mt19937 rng(4791);
  const auto& frames = test::all_rxe_frames();
  for (int i = 0; i < 100000; ++i) {
    Bytes f = frames[rng() % frames.size()].bytes;
    if (i % 4 == 0) {
      f.resize(rng() % 128);
      for (auto& x : f) x = static_cast<std::uint8_t>(rng());
    } else {
      const int flips = 1 + static_cast<int>(rng() % 8);
      for (int k = 0; k < flips; ++k) f[rng() % f.size()] = static_cast<std::uint8_t>(rng());
      if (i % 3 == 0) seal_frame(f);  // re-seal so that the parser gets past the ICRC
      f.resize(f.size() + rng() % 8);  // Ethernet padding
    }
    RoceFrame r;
    if (parse_frame(f, r).ok()) {
      REQUIRE(r.packet.payload.data() >= f.data());
      REQUIRE(r.packet.payload.data() + r.packet.payload.size() <= f.data() + f.size());
    }
  }
}

}  // namespace
}  // namespace rrdma::rocev2
