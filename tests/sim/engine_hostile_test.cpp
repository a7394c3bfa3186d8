// Hostile input straight into the engine: random opcodes, QPNs, PSNs near the expected
// ones, extension headers present or missing, lying RETH lengths, keys valid and invalid,
// payloads of any size. Nothing may crash (the sanitizer build checks memory), no access
// may fall outside a registered region, and every packet is counted as received.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

TransportPacket random_packet(std::mt19937_64& rng, QpType type, const Pair& p, const MrFacts& mr,
                              std::vector<std::uint8_t>& payload, Psn near) {
  auto coin = [&](int percent) { return static_cast<int>(rng() % 100) < percent; };
  TransportPacket t;
  // Mostly the opcodes the QP type knows, sometimes anything at all.
  const std::uint64_t own = type == QpType::Rc ? rng() % 0x18 : type == QpType::Uc ? 0x20 | rng() % 0x0C : 0x64 | rng() % 2;
  t.bth.opcode = static_cast<Opcode>(coin(80) ? own : rng() % 256);
  t.bth.dest_qp = coin(90) ? (coin(50) ? p.a.qpn : p.b.qpn) : Qpn(static_cast<std::uint32_t>(rng()));
  t.bth.psn = coin(70) ? near + static_cast<std::uint32_t>(rng() % 4) : near + static_cast<std::uint32_t>(rng() % 64) - 32;
  t.bth.ack_req = coin(50);
  t.bth.solicited = coin(10);
  const std::uint64_t va = coin(70) ? mr.base + rng() % (mr.length + 64) : rng();
  const Rkey key = coin(70) ? mr.rkey : Rkey(static_cast<std::uint32_t>(rng()));
  const std::uint32_t length = coin(70) ? static_cast<std::uint32_t>(rng() % 9000)
                                        : static_cast<std::uint32_t>(rng());
  if (coin(60)) t.reth = Reth{va, key, length};
  if (coin(30)) t.atomic_eth = AtomicEth{va & (coin(80) ? ~7ull : ~0ull), key, rng(), rng()};
  if (coin(50)) t.aeth = Aeth{static_cast<std::uint8_t>(coin(50) ? 0x1F : rng()), Msn(static_cast<std::uint32_t>(rng()))};
  if (coin(20)) t.atomic_ack_eth = AtomicAckEth{rng()};
  if (coin(20)) t.imm = ImmDt{static_cast<std::uint32_t>(rng())};
  if (coin(10)) t.ieth = Ieth{key};
  if (coin(type == QpType::Ud ? 90 : 10)) t.deth = Deth{Qkey(static_cast<std::uint32_t>(coin(50) ? 0x11111111 : rng())), Qpn(17)};
  payload.resize(coin(50) ? 1024 : rng() % 5000);
  const std::uint8_t fill = static_cast<std::uint8_t>(rng());
  std::fill(payload.begin(), payload.end(), fill);
  t.payload = payload;
  return t;
}

// Returns how many random packets were accepted and executed.
int hammer(QpType type, std::uint64_t seed) {
  Pair p(type, 1024);
  std::mt19937_64 rng(seed);
  const MrFacts a_mr = p.a.memory.add(p.a.pd, kAllRemote, 8192, 0x100000);
  const MrFacts b_mr = p.b.memory.add(p.b.pd, kAllRemote, 8192, 0x900000);
  std::vector<std::uint8_t> payload;
  std::uint64_t fed = 0;
  int revived = 0;
  for (int round = 0; round < 200; ++round) {
    // A hostile packet may well have put a QP in ERR: reset and reconnect it, so that the
    // next packets meet a working QP again.
    for (Side* s : {&p.a, &p.b}) {
      if (s->state() != QpState::Err && s->state() != QpState::Sqe) continue;
      QpAttr reset;
      reset.state = QpState::Reset;
      REQUIRE(s->engine.modify_qp(s->qpn, reset, qp_attr::kState, p.now) == VerbResult::Ok);
      Side& peer = s == &p.a ? p.b : p.a;
      p.connect(*s, peer, s == &p.a ? p.a_psn : p.b_psn, s == &p.a ? p.b_psn : p.a_psn, type, 1024, {}, 0);
      ++revived;
    }
    // Keep some work outstanding on both sides so responses have something to hit.
    for (Side* s : {&p.a, &p.b}) {
      const MrFacts& mr = s == &p.a ? a_mr : b_mr;
      s->engine.post_recv(s->qpn, recv_wr(1, mr, 4096));
      SendWr wr = send_wr(2, type == QpType::Rc && rng() % 2 ? WrOpcode::RdmaRead : WrOpcode::Send, mr,
                          static_cast<std::uint32_t>(rng() % 3000));
      wr.remote_addr = (s == &p.a ? b_mr : a_mr).base;
      wr.rkey = (s == &p.a ? b_mr : a_mr).rkey;
      wr.ud_dest_ip = (s == &p.a ? p.b : p.a).ip;
      wr.ud_remote_qpn = (s == &p.a ? p.b : p.a).qpn;
      s->engine.post_send(s->qpn, wr, p.now);
    }
    for (int i = 0; i < 50; ++i) {
      Side& to = rng() % 2 ? p.a : p.b;
      const MrFacts& mr = &to == &p.a ? a_mr : b_mr;
      const Psn near = rng() % 2 ? p.a_psn : p.b_psn;
      const TransportPacket t = random_packet(rng, type, p, mr, payload, near);
      to.engine.receive(t, PacketSource{p.b.ip, 0xC000, {}}, p.now);
      ++fed;
    }
    p.now += std::chrono::milliseconds(1);
    p.a.engine.advance(p.now);
    p.b.engine.advance(p.now);
    p.a.host.take_sent();
    p.b.host.take_sent();
  }
  CHECK(p.a.memory.out_of_bounds == 0);
  CHECK(p.b.memory.out_of_bounds == 0);
  CHECK(p.a.engine.counters().packets_received + p.b.engine.counters().packets_received == fed);
  const EngineCounters& c = p.b.engine.counters();
  CHECK(c.bad_opcode + c.unknown_qpn + c.bad_header > 0);
  if (type == QpType::Rc) CHECK(revived > 0);
  return p.a.observer.count(PacketDecision::Accepted) + p.b.observer.count(PacketDecision::Accepted);
}

TEST_CASE("random hostile packets: no crash, no access outside a region, all counted") {
  int accepted[3] = {0, 0, 0};
  for (std::uint64_t seed = 1; seed <= 10; ++seed) {
    accepted[0] += hammer(QpType::Rc, seed);
    accepted[1] += hammer(QpType::Uc, seed);
    accepted[2] += hammer(QpType::Ud, seed);
  }
  // The random packets also reached the execution paths, not only the early drops.
  for (int n : accepted) CHECK(n > 0);
}

// QP 0 (SMI) and QP 1 (GSI) are the management QPs: their packets go to the GSI endpoint
// (rocev2/gsi.h) before the engine, and no application may get their numbers. The engine
// numbers QPs from 17, as rxe (0x11 in every capture), wraps back to 17, and refuses 0, 1 and
// the multicast QPN 0xFFFFFF when a caller asks for them.
TEST_CASE("engine: QP numbers start at 17 and are never 0, 1 or 0xFFFFFF, even when asked for") {
  PlainMemory memory;
  RecordingHost host;
  Engine engine(host, memory, memory);
  QpInit init;
  std::vector<std::uint32_t> numbers;
  for (int round = 0; round < 3; ++round) {
    for (QpType type : {QpType::Rc, QpType::Uc, QpType::Ud}) {
      init.type = type;
      const auto qpn = engine.create_qp(init);
      REQUIRE(qpn);
      numbers.push_back(qpn->value());
    }
  }
  CHECK(numbers == std::vector<std::uint32_t>{17, 18, 19, 20, 21, 22, 23, 24, 25});
  for (std::uint32_t reserved : {0u, 1u, 0xFFFFFFu}) {
    init.qpn = Qpn(reserved);
    CHECK_FALSE(engine.create_qp(init));
  }
  init.qpn = Qpn(2);  // the first a caller may choose
  CHECK(engine.create_qp(init));
  // A packet for QP 1 that reached the engine anyway is not for any of its QPs.
  TransportPacket p;
  p.bth.opcode = Opcode::UdSendOnly;
  p.bth.dest_qp = Qpn(1);
  p.deth = Deth{Qkey(0x80010000), Qpn(1)};
  engine.receive(p, PacketSource{}, Instant{});
  CHECK(engine.counters().unknown_qpn == 1);
  CHECK(host.sent.empty());
}

}  // namespace
}  // namespace rrdma::test
