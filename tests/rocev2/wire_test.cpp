// Transport headers: views, values, parse_transport / emit_transport over hand-made and
// captured bytes, and the errors hostile input must produce.
#include <catch2/catch.hpp>

#include <random>
#include <vector>

#include "rocev2/wire.h"
#include "tests/rocev2/rxe_captures.h"

namespace rrdma::rocev2 {
namespace {

using Bytes = std::vector<std::uint8_t>;

template <typename View, typename Value>
Bytes emit_bytes(const Value& v) {
  Bytes out(View::kLength, 0xEE);
  emit(v, out);
  return out;
}

// A UDP payload: the given headers, `payload` bytes of 0x5A, pad and a (dummy) ICRC.
Bytes udp_payload(Bytes headers, std::size_t payload, std::size_t pad) {
  headers.insert(headers.end(), payload, 0x5A);
  headers.insert(headers.end(), pad, 0);
  headers.insert(headers.end(), kIcrcLength, 0xCC);
  return headers;
}

TEST_CASE("BTH: every field at its IBA 9.2 position, both ways", "[wire]") {
  // opcode RDMA WRITE ONLY; SE, M, PadCnt 2, TVer 1; P_Key; FECN+BECN; QP; A; PSN.
  const Bytes bytes{0x0A, 0xE1, 0x12, 0x34, 0xC0, 0xAB, 0xCD, 0xEF, 0x80, 0x12, 0x34, 0x56};
  const auto view = BthView::check(bytes);
  REQUIRE(view);
  const Bth bth = parse(*view);
  CHECK(bth.opcode == Opcode::RcWriteOnly);
  CHECK(bth.solicited);
  CHECK(bth.mig_req);
  CHECK(bth.pad_count == 2);
  CHECK(bth.transport_version == 1);
  CHECK(bth.pkey == Pkey{0x1234});
  CHECK(bth.fecn);
  CHECK(bth.becn);
  CHECK(bth.dest_qp == Qpn{0xABCDEF});
  CHECK(bth.ack_req);
  CHECK(bth.psn == Psn{0x123456});
  CHECK(emit_bytes<BthView>(bth) == bytes);
}

TEST_CASE("BTH: reserved bits are ignored on parse and emitted as zero", "[wire]") {
  const Bytes bytes{0x04, 0x00, 0xFF, 0xFF, 0x3F, 0x00, 0x00, 0x11, 0x7F, 0x00, 0x00, 0x01};
  const Bth bth = parse(*BthView::check(bytes));
  CHECK_FALSE(bth.fecn);
  CHECK_FALSE(bth.becn);
  CHECK_FALSE(bth.ack_req);
  const Bytes out = emit_bytes<BthView>(bth);
  CHECK(out[4] == 0x00);
  CHECK(out[8] == 0x00);
}

TEST_CASE("Extension headers: fields at their IBA 9.3 positions, both ways", "[wire]") {
  const Bytes reth{1, 2, 3, 4, 5, 6, 7, 8, 0xA1, 0xA2, 0xA3, 0xA4, 0x00, 0x01, 0x00, 0x02};
  const Reth r = parse(*RethView::check(reth));
  CHECK(r.virtual_address == 0x0102030405060708);
  CHECK(r.rkey == Rkey{0xA1A2A3A4});
  CHECK(r.dma_length == 0x00010002);
  CHECK(emit_bytes<RethView>(r) == reth);

  const Bytes aeth{0x62, 0x01, 0x02, 0x03};
  const Aeth a = parse(*AethView::check(aeth));
  CHECK(a.syndrome == 0x62);
  CHECK(a.msn == Msn{0x010203});
  CHECK(emit_bytes<AethView>(a) == aeth);

  Bytes atomic(28);
  for (std::size_t i = 0; i < atomic.size(); ++i) atomic[i] = static_cast<std::uint8_t>(i + 1);
  const AtomicEth at = parse(*AtomicEthView::check(atomic));
  CHECK(at.virtual_address == 0x0102030405060708);
  CHECK(at.rkey == Rkey{0x090A0B0C});
  CHECK(at.swap_add == 0x0D0E0F1011121314);
  CHECK(at.compare == 0x15161718191A1B1C);
  CHECK(emit_bytes<AtomicEthView>(at) == atomic);

  const Bytes ack{0xFE, 0xDC, 0xBA, 0x98, 0x76, 0x54, 0x32, 0x10};
  const AtomicAckEth aa = parse(*AtomicAckEthView::check(ack));
  CHECK(aa.original_data == 0xFEDCBA9876543210);
  CHECK(emit_bytes<AtomicAckEthView>(aa) == ack);

  const Bytes deth{0x80, 0x01, 0x02, 0x03, 0x00, 0x0A, 0x0B, 0x0C};
  const Deth d = parse(*DethView::check(deth));
  CHECK(d.qkey == Qkey{0x80010203});
  CHECK(d.src_qp == Qpn{0x0A0B0C});
  CHECK(emit_bytes<DethView>(d) == deth);

  const Bytes four{0xDE, 0xAD, 0xBE, 0xEF};
  CHECK(parse(*ImmDtView::check(four)).value == 0xDEADBEEF);
  CHECK(emit_bytes<ImmDtView>(ImmDt{0xDEADBEEF}) == four);
  CHECK(parse(*IethView::check(four)).rkey == Rkey{0xDEADBEEF});
  CHECK(emit_bytes<IethView>(Ieth{Rkey{0xDEADBEEF}}) == four);
  CHECK(parse(*FethView::check(four)).bits == 0xDEADBEEF);
}

TEST_CASE("Views refuse buffers shorter than their header and cover exactly it", "[wire]") {
  const Bytes big(64, 0);
  const ByteSpan all(big);
  CHECK_FALSE(BthView::check(all.first(11)));
  CHECK_FALSE(RethView::check(all.first(15)));
  CHECK_FALSE(AethView::check(all.first(3)));
  CHECK_FALSE(AtomicEthView::check(all.first(27)));
  CHECK_FALSE(AtomicAckEthView::check(all.first(7)));
  CHECK_FALSE(DethView::check(all.first(7)));
  CHECK_FALSE(ImmDtView::check(all.first(3)));
  CHECK_FALSE(IethView::check(all.first(3)));
  CHECK_FALSE(FethView::check(all.first(3)));
  CHECK(BthView::check(all)->bytes().size() == 12);
  CHECK(AtomicEthView::check(all)->bytes().size() == 28);
}

Bytes bth_bytes(std::uint8_t opcode, std::uint8_t flags = 0) {
  return {opcode, flags, 0xFF, 0xFF, 0, 0, 0, 0x11, 0, 0, 0, 1};
}

TEST_CASE("parse_transport: headers in opcode order, payload without pad and ICRC", "[wire]") {
  // RC RDMA WRITE ONLY WITH IMMEDIATE: BTH, RETH, ImmDt, 5 bytes payload, 3 pad.
  Bytes h = bth_bytes(0x0B, 0x30);
  const Bytes reth{0, 0, 0, 0, 0, 0, 0x10, 0, 0, 0, 0x02, 0x44, 0, 0, 0, 5};
  const Bytes imm{1, 2, 3, 4};
  h.insert(h.end(), reth.begin(), reth.end());
  h.insert(h.end(), imm.begin(), imm.end());
  const Bytes in = udp_payload(h, 5, 3);
  TransportPacket p;
  REQUIRE(parse_transport(in, p) == TransportError::none);
  CHECK(p.bth.opcode == Opcode::RcWriteOnlyImm);
  REQUIRE(p.reth);
  CHECK(p.reth->virtual_address == 0x1000);
  CHECK(p.reth->rkey == Rkey{0x244});
  CHECK(p.reth->dma_length == 5);
  REQUIRE(p.imm);
  CHECK(p.imm->value == 0x01020304);
  CHECK_FALSE(p.aeth);
  CHECK_FALSE(p.deth);
  CHECK(p.payload.size() == 5);
  CHECK(p.payload.data() == in.data() + 12 + 16 + 4);
  CHECK(transport_length(p) == in.size());

  Bytes out(in.size() - kIcrcLength, 0xEE);
  REQUIRE(emit_transport(p, out) == EmitError::none);
  CHECK(std::equal(out.begin(), out.end(), in.begin()));
}

TEST_CASE("parse_transport: FLUSH carries the FETH before the RETH (IBA 1.5)", "[wire]") {
  Bytes h = bth_bytes(0x1C);
  const Bytes feth{0, 0, 0, 0x11};
  const Bytes reth{0, 0, 0, 0, 0, 0, 0x20, 0, 0, 0, 0, 0x07, 0, 0, 0x10, 0};
  h.insert(h.end(), feth.begin(), feth.end());
  h.insert(h.end(), reth.begin(), reth.end());
  const Bytes in = udp_payload(h, 0, 0);
  TransportPacket p;
  REQUIRE(parse_transport(in, p) == TransportError::none);
  REQUIRE(p.feth);
  CHECK(p.feth->bits == 0x11);
  REQUIRE(p.reth);
  CHECK(p.reth->virtual_address == 0x2000);
  CHECK(p.reth->rkey == Rkey{7});
  CHECK(p.reth->dma_length == 0x1000);
  Bytes out(in.size() - kIcrcLength);
  REQUIRE(emit_transport(p, out) == EmitError::none);
  CHECK(std::equal(out.begin(), out.end(), in.begin()));
}

// rxe_req.c builds an ATOMIC_WRITE as BTH (AckReq), RETH (length 8) and the 8 bytes, no pad;
// rxe_resp.c answers it, and a FLUSH, with an RDMA READ response ONLY that has an AETH and
// no data (send_read_response_ack). Byte for byte, both ways.
TEST_CASE("ATOMIC_WRITE and its empty READ response, as rxe lays them out (IBA 1.5 A19)", "[wire]") {
  Bytes h = bth_bytes(0x1D, 0x00);
  h[8] = 0x80;  // AckReq
  const Bytes reth{0, 0, 0x7f, 0xfe, 0x12, 0x34, 0x56, 0x78, 0x00, 0x00, 0x02, 0x44, 0, 0, 0, 8};
  const Bytes value{0x88, 0x77, 0x66, 0x55, 0x44, 0x33, 0x22, 0x11};
  h.insert(h.end(), reth.begin(), reth.end());
  h.insert(h.end(), value.begin(), value.end());
  h.insert(h.end(), kIcrcLength, 0xCC);
  TransportPacket p;
  REQUIRE(parse_transport(h, p) == TransportError::none);
  CHECK(p.bth.opcode == Opcode::RcAtomicWrite);
  CHECK(p.bth.ack_req);
  CHECK(p.bth.pad_count == 0);
  REQUIRE(p.reth);
  CHECK(p.reth->virtual_address == 0x00007ffe12345678ull);
  CHECK(p.reth->dma_length == 8);
  CHECK_FALSE(p.atomic_eth);
  CHECK_FALSE(p.feth);
  CHECK(std::equal(p.payload.begin(), p.payload.end(), value.begin(), value.end()));
  Bytes out(h.size() - kIcrcLength);
  REQUIRE(emit_transport(p, out) == EmitError::none);
  CHECK(std::equal(out.begin(), out.end(), h.begin()));

  TransportPacket answer;
  answer.bth.opcode = Opcode::RcReadResponseOnly;
  answer.bth.dest_qp = Qpn{0x11};
  answer.bth.psn = Psn{1};
  answer.aeth = Aeth{0x1F, Msn{3}};
  const Bytes expected{0x10, 0x00, 0xFF, 0xFF, 0, 0, 0, 0x11, 0, 0, 0, 1, 0x1F, 0, 0, 3};
  CHECK(transport_length(answer) == expected.size() + kIcrcLength);
  Bytes wire(expected.size());
  REQUIRE(emit_transport(answer, wire) == EmitError::none);
  CHECK(wire == expected);
}

TEST_CASE("parse_transport: each kind of malformed packet gets its own error", "[wire][hostile]") {
  TransportPacket p;
  SECTION("shorter than BTH + ICRC") {
    CHECK(parse_transport(Bytes(15, 0x04), p) == TransportError::truncated);
    CHECK(parse_transport(Bytes{}, p) == TransportError::truncated);
  }
  SECTION("extension headers cut off") {
    CHECK(parse_transport(udp_payload(bth_bytes(0x0C), 0, 0), p) == TransportError::truncated);
  }
  SECTION("opcodes outside the table") {
    for (int op : {0x15, 0x18, 0x1F, 0x2C, 0x30, 0x40, 0x63, 0x66, 0x80, 0xC0, 0xFF})
      CHECK(parse_transport(udp_payload(bth_bytes(static_cast<std::uint8_t>(op)), 64, 0), p) ==
            TransportError::unknown_opcode);
  }
  SECTION("transport version other than 0") {
    CHECK(parse_transport(udp_payload(bth_bytes(0x04, 0x01), 4, 0), p) == TransportError::bad_transport_version);
  }
  SECTION("length not a multiple of 4") {
    CHECK(parse_transport(udp_payload(bth_bytes(0x04), 3, 0), p) == TransportError::misaligned);
  }
  SECTION("more pad than payload") {
    CHECK(parse_transport(udp_payload(bth_bytes(0x04, 0x30), 0, 0), p) == TransportError::bad_pad_count);
    CHECK(parse_transport(udp_payload(bth_bytes(0x04, 0x30), 3, 1), p) == TransportError::none);
  }
  SECTION("payload on an ACK") {
    Bytes ack = bth_bytes(0x11);
    ack.insert(ack.end(), {0x1F, 0, 0, 1});
    CHECK(parse_transport(udp_payload(ack, 0, 0), p) == TransportError::none);
    CHECK(parse_transport(udp_payload(ack, 4, 0), p) == TransportError::unexpected_payload);
  }
}

TEST_CASE("emit_transport_headers: the packet must carry exactly its opcode's headers", "[wire]") {
  TransportPacket p;
  p.bth.opcode = Opcode::RcWriteFirst;
  Bytes out(64);
  CHECK(emit_transport_headers(p, out) == EmitError::missing_header);
  p.reth = Reth{};
  CHECK(emit_transport_headers(p, out) == EmitError::none);
  p.aeth = Aeth{};
  CHECK(emit_transport_headers(p, out) == EmitError::unexpected_header);
  p.aeth.reset();
  const Bytes payload(5, 1);
  p.payload = payload;
  CHECK(emit_transport_headers(p, out) == EmitError::bad_pad_count);
  p.bth.pad_count = pad_count_for(payload.size());
  CHECK(emit_transport_headers(p, out) == EmitError::none);
  CHECK(emit_transport_headers(p, std::span(out).first(27)) == EmitError::buffer_too_small);
  CHECK(emit_transport(p, std::span(out).first(28 + 7)) == EmitError::buffer_too_small);
  CHECK(emit_transport(p, std::span(out).first(28 + 8)) == EmitError::none);
  p.bth.opcode = static_cast<Opcode>(0x1F);
  CHECK(emit_transport_headers(p, out) == EmitError::unknown_opcode);
  p.bth.opcode = Opcode::RcAck;
  p.reth.reset();
  p.aeth = Aeth{};
  CHECK(emit_transport_headers(p, out) == EmitError::unexpected_payload);
}

TEST_CASE("pad_count_for brings payloads to 4-byte multiples", "[wire]") {
  CHECK(pad_count_for(0) == 0);
  CHECK(pad_count_for(1) == 3);
  CHECK(pad_count_for(2) == 2);
  CHECK(pad_count_for(3) == 1);
  CHECK(pad_count_for(1024) == 0);
  CHECK(pad_count_for(1025) == 3);
}

// Golden: every rxe packet parses, and emitting what was parsed gives back its bytes.
TEST_CASE("Golden: every rxe packet parses and re-emits byte for byte", "[wire][golden]") {
  std::size_t packets = 0;
  for (const test::RxeFrame& f : test::all_rxe_frames()) {
    INFO(f.capture << " frame " << f.index + 1);
    const test::Layers l = test::split_layers(f.bytes);
    TransportPacket p;
    REQUIRE(parse_transport(l.udp_payload, p) == TransportError::none);
    const OpcodeFlags flags = opcode_info(p.bth.opcode).flags;
    CHECK(p.reth.has_value() == flags.has(OpcodeFlags::kReth));
    CHECK(p.aeth.has_value() == flags.has(OpcodeFlags::kAeth));
    CHECK(p.deth.has_value() == flags.has(OpcodeFlags::kDeth));
    CHECK(p.atomic_eth.has_value() == flags.has(OpcodeFlags::kAtomicEth));
    CHECK(p.atomic_ack_eth.has_value() == flags.has(OpcodeFlags::kAtomicAckEth));
    CHECK(transport_length(p) == l.udp_payload.size());
    Bytes out(l.udp_payload.size() - kIcrcLength, 0xEE);
    REQUIRE(emit_transport(p, out) == EmitError::none);
    CHECK(std::equal(out.begin(), out.end(), l.udp_payload.begin()));
    ++packets;
  }
  CHECK(packets == 1877);  // CAPTURES.md / PROTOCOL.md count
}

TransportPacket parsed(const std::string& capture, std::size_t tshark_number) {
  const test::Layers l = test::split_layers(test::rxe_frame(capture, tshark_number));
  auto p = parse_transport(l.udp_payload);
  REQUIRE(p);
  return *p;
}

// Values read off `tshark -r FILE -V` for the same frames.
TEST_CASE("Golden: field values agree with Wireshark's decoding", "[wire][golden]") {
  SECTION("RDMA WRITE First, rxe_write_bw frame 1") {
    const TransportPacket p = parsed("rxe_write_bw.pcapng", 1);
    CHECK(p.bth.opcode == Opcode::RcWriteFirst);
    CHECK(p.bth.psn == Psn{16161330});
    CHECK(p.bth.dest_qp == Qpn{0x11});
    CHECK(p.bth.pkey == Pkey{65535});
    REQUIRE(p.reth);
    CHECK(p.reth->virtual_address == 0x000055fb890d8710);
    CHECK(p.reth->rkey == Rkey{0x2ff});
    CHECK(p.reth->dma_length == 10000);
    CHECK(p.payload.size() == 1024);
    CHECK(p.payload[0] == 0xb8);
    CHECK(p.payload[1] == 0x4d);
  }
  SECTION("ACK, rxe_write_bw frame 51") {
    const TransportPacket p = parsed("rxe_write_bw.pcapng", 51);
    CHECK(p.bth.opcode == Opcode::RcAck);
    CHECK(p.bth.psn == Psn{16161339});
    REQUIRE(p.aeth);
    CHECK(p.aeth->syndrome == 31);
    CHECK(p.aeth->msn == Msn{1});
    CHECK(p.payload.empty());
  }
  SECTION("NAK PSN sequence error, rxe_write_loss frame 57") {
    const TransportPacket p = parsed("rxe_write_loss.pcapng", 57);
    CHECK(p.bth.psn == Psn{9668715});
    REQUIRE(p.aeth);
    CHECK(p.aeth->syndrome == 0x60);
    CHECK(p.aeth->msn == Msn{0});
  }
  SECTION("FETCH_ADD, rxe_atomic_bw frame 1") {
    const TransportPacket p = parsed("rxe_atomic_bw.pcapng", 1);
    CHECK(p.bth.opcode == Opcode::RcFetchAdd);
    CHECK(p.bth.psn == Psn{9495270});
    REQUIRE(p.atomic_eth);
    CHECK(p.atomic_eth->virtual_address == 0x000056452be40000);
    CHECK(p.atomic_eth->rkey == Rkey{0x244});
    CHECK(p.atomic_eth->swap_add == 1);
    CHECK(p.atomic_eth->compare == 0);
  }
  SECTION("ATOMIC ACKNOWLEDGE, rxe_atomic_bw frame 6") {
    const TransportPacket p = parsed("rxe_atomic_bw.pcapng", 6);
    CHECK(p.bth.opcode == Opcode::RcAtomicAck);
    REQUIRE(p.aeth);
    CHECK(p.aeth->syndrome == 31);
    CHECK(p.aeth->msn == Msn{1});
    REQUIRE(p.atomic_ack_eth);
    CHECK(p.atomic_ack_eth->original_data == 7236162430998048067ull);
  }
  SECTION("COMPARE_SWAP, rxe_cas frame 1") {
    const TransportPacket p = parsed("rxe_cas.pcapng", 1);
    CHECK(p.bth.opcode == Opcode::RcCompareSwap);
    CHECK(p.bth.psn == Psn{3963322});
    REQUIRE(p.atomic_eth);
    CHECK(p.atomic_eth->virtual_address == 0x00005573c5a84000);
    CHECK(p.atomic_eth->rkey == Rkey{0x297});
  }
  SECTION("UD SEND only, rxe_ud_pingpong frame 1") {
    const TransportPacket p = parsed("rxe_ud_pingpong.pcapng", 1);
    CHECK(p.bth.opcode == Opcode::UdSendOnly);
    CHECK(p.bth.psn == Psn{2114054});
    REQUIRE(p.deth);
    CHECK(p.deth->qkey == Qkey{0x11111111});
    CHECK(p.deth->src_qp == Qpn{0x11});
    CHECK(p.payload.size() == 512);
  }
  SECTION("RDMA READ Request and its first response, rxe_read_bw frames 1 and 6") {
    const TransportPacket req = parsed("rxe_read_bw.pcapng", 1);
    CHECK(req.bth.opcode == Opcode::RcReadRequest);
    CHECK(req.bth.psn == Psn{835806});
    REQUIRE(req.reth);
    CHECK(req.reth->virtual_address == 0x00005609fcd4f710);
    CHECK(req.reth->rkey == Rkey{0x2e6});
    CHECK(req.reth->dma_length == 10000);
    const TransportPacket resp = parsed("rxe_read_bw.pcapng", 6);
    CHECK(resp.bth.opcode == Opcode::RcReadResponseFirst);
    CHECK(resp.bth.psn == req.bth.psn);
    REQUIRE(resp.aeth);
    CHECK(resp.aeth->syndrome == 31);
  }
}

TEST_CASE("describe: one trace line per packet, fields as Wireshark decodes them", "[wire]") {
  CHECK(describe(parsed("rxe_write_bw.pcapng", 1)) ==
        "RC RDMA_WRITE_FIRST qp 0x000011 psn 16161330 reth{va 0x55fb890d8710 rkey 0x2ff len 10000} payload 1024");
  CHECK(describe(parsed("rxe_write_loss.pcapng", 57)) == "RC ACKNOWLEDGE qp 0x000011 psn 9668715 aeth{syndrome 0x60 msn 0}");
  CHECK(describe(parsed("rxe_atomic_bw.pcapng", 1)) ==
        "RC FETCH_ADD qp 0x000011 psn 9495270 A atomic{va 0x56452be40000 rkey 0x244 swap_add 1 compare 0}");
  CHECK(describe(parsed("rxe_ud_pingpong.pcapng", 1)) ==
        "UD SEND_ONLY qp 0x000011 psn 2114054 deth{qkey 0x11111111 src_qp 0x000011} payload 512");
  TransportPacket odd;
  odd.bth.opcode = static_cast<Opcode>(0xC0);
  odd.bth.becn = true;
  odd.bth.pad_count = 2;
  CHECK(describe(odd) == "UNKNOWN(0xc0) qp 0x000000 psn 0 BECN pad 2");
}

TEST_CASE("Hostile: every truncation of every rxe packet", "[wire][hostile]") {
  for (const test::RxeFrame& f : test::all_rxe_frames()) {
    const test::Layers l = test::split_layers(f.bytes);
    const std::size_t headers = opcode_info(Opcode{l.udp_payload[0]}).header_length;
    for (std::size_t n = 0; n < l.udp_payload.size(); ++n) {
      // A copy of exactly n bytes, so that the sanitizer sees any read past it.
      const Bytes cut(l.udp_payload.begin(), l.udp_payload.begin() + static_cast<std::ptrdiff_t>(n));
      TransportPacket p;
      const TransportError e = parse_transport(cut, p);
      if (n < headers + kIcrcLength) {
        REQUIRE(e == TransportError::truncated);
      } else if (n % 4 != 0) {
        REQUIRE(e == TransportError::misaligned);
      } else if (e == TransportError::none) {
        REQUIRE(p.payload.data() >= cut.data());
        REQUIRE(p.payload.data() + p.payload.size() <= cut.data() + n - kIcrcLength);
      }
    }
  }
}

TEST_CASE("Hostile: random bytes never escape their buffer", "[wire][hostile]") {
  std::mt19937 rng(4791);
  for (int i = 0; i < 200000; ++i) {
    Bytes b(rng() % 80);
    for (auto& x : b) x = static_cast<std::uint8_t>(rng());
    if (!b.empty() && (i & 1)) b[0] = static_cast<std::uint8_t>(rng() % 0x18);  // mostly valid opcodes
    if (b.size() > 1 && (i & 2)) b[1] &= 0xF0;                                      // TVer 0
    TransportPacket p;
    if (parse_transport(b, p) == TransportError::none) {
      REQUIRE(p.payload.data() >= b.data());
      REQUIRE(p.payload.data() + p.payload.size() <= b.data() + b.size());
      REQUIRE(transport_length(p) == b.size());
    }
  }
}

}  // namespace
}  // namespace rrdma::rocev2
