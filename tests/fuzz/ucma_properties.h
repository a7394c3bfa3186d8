// What must hold for any script of ucma frames that local processes (through the rdma_cm
// shim, or pretending to be it) send the daemon's rdma_cm device (verbs/device/ucma_service.h),
// shared by the libFuzzer target (fuzz_ucma.cpp) and the ctest replay
// (control_regressions_test.cpp).
//
// Two services (10.0.0.1 and 10.0.0.2) joined by a queue of MADs standing in for QP 1. The
// first byte chooses the mode: 0xFF, the rest is one frame for ucma::parse (a frame that
// parses must emit back to the same bytes). Otherwise the input is a script of up to
// kMaxUcmaSteps steps, each a byte s: host s & 1, then by (s >> 1) % 8:
//   0     open a channel (uid 1000, or 2000 if the next byte is odd)
//   1..4  a command: next bytes = command number (% 24), channel slot, body length / 2
//         (0..255 -> 0..510 bytes), the body, then a patch byte p: when odd, the small id
//         (p >> 1) % 8 + 1 is written at offset (next byte) of the body, where librdmacm's
//         structures keep ids; the aux channel (MIGRATE_ID) is the next slot
//   5     deliver the oldest MAD in flight, its byte (next byte) flipped when the one after is odd
//   6     advance both clocks by (next byte) * 64 ms
//   7     close a channel (slot: next byte)
// What holds:
//  - every reply is a reply of the request's kind, command and id, with status 0 or an errno
//    (1 .. 4095) and a body no longer than kMaxUcmaBody;
//  - once every channel is closed and timewait has passed, neither service holds an id, a
//    listener or a CM connection (nor a REQ held for a listener, nor an index entry);
//  - no id was ever asked to change state as cma.c never does (verbs/device/cm_id.h);
//  - destroying the services leaves no descriptor of theirs open.
// Returns a description of the first property that fails, or nullptr.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include "verbs/contract/ucma_protocol.h"
#include "verbs/device/ucma_service.h"

namespace rrdma::fuzz {

inline constexpr std::size_t kMaxUcmaSteps = 96;

namespace ucma_fuzz {

struct Mad {
  stack::Ipv4Address from;
  stack::Ipv4Address to;
  std::array<std::uint8_t, rocev2::kMadLength> bytes;
};

class QueueSink final : public rocev2::cm::CmMadSink {
 public:
  QueueSink(std::deque<Mad>& wire, stack::Ipv4Address self) : wire_(wire), self_(self) {}
  void send_cm_mad(stack::Ipv4Address destination, rocev2::MadSpan mad, Instant) override {
    if (wire_.size() >= 256) return;  // a full wire loses MADs, as a link would
    Mad m{self_, destination, {}};
    std::memcpy(m.bytes.data(), mad.data(), mad.size());
    wire_.push_back(m);
  }

 private:
  std::deque<Mad>& wire_;
  stack::Ipv4Address self_;
};

class Resolver final : public verbs::AddressResolver {
 public:
  Reach reach(stack::Ipv4Address destination, Instant) override {
    return (destination.value & 0xFFFFFF00u) == 0x0A000000u ? Reach::reachable : Reach::resolving;
  }
};

class Watcher final : public verbs::FdWatcher {
 public:
  std::map<int, Handler> watched;
  void watch(int fd, Handler on_ready) override { watched[fd] = std::move(on_ready); }
  void unwatch(int fd) override { watched.erase(fd); }
  void signal(int) override {}
  void forget(int) override {}
  void run_ready(Instant now) {
    std::vector<int> ready;
    for (const auto& [fd, handler] : watched) {
      char byte;
      const ssize_t n = ::recv(fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK);
      if (n == 0 || (n < 0 && errno != EAGAIN)) ready.push_back(fd);
    }
    for (int fd : ready) {
      if (const auto it = watched.find(fd); it != watched.end()) {
        Handler h = it->second;
        h(now);
      }
    }
  }
};

struct Host {
  Host(std::deque<Mad>& wire, stack::Ipv4Address ip, std::uint8_t low) : sink(wire, ip) {
    verbs::UcmaConfig c;
    c.address = ip;
    c.node_guid = 0x0200'00FF'FE00'0000ull | low;
    c.cm.local_ca_guid = c.node_guid;
    c.cm.local_address = ip;
    c.cm.tid_high = low;
    c.cm.first_comm_id = 0x1000u * low;
    service = std::make_unique<verbs::UcmaService>(c, sink, resolver, watcher);
  }
  QueueSink sink;
  Resolver resolver;
  Watcher watcher;
  std::unique_ptr<verbs::UcmaService> service;
  std::vector<std::pair<std::uint64_t, int>> channels;  // token, application end (-1 once closed)
};

class Reader {
 public:
  explicit Reader(ByteSpan in) : in_(in) {}
  bool empty() const { return at_ >= in_.size(); }
  std::uint8_t byte() { return at_ < in_.size() ? in_[at_++] : 0; }
  ByteSpan take(std::size_t n) {
    n = std::min(n, in_.size() - std::min(at_, in_.size()));
    const ByteSpan out = in_.subspan(at_, n);
    at_ += n;
    return out;
  }

 private:
  ByteSpan in_;
  std::size_t at_ = 0;
};

inline std::uint64_t slot_token(const Host& h, std::uint8_t slot) {
  if (h.channels.empty() || slot == 0xFF) return 0x5EED;  // a token nobody was given
  return h.channels[slot % h.channels.size()].first;
}

inline const char* check_reply(const verbs::ucma::Frame& request, const verbs::ucma::Frame& reply) {
  if (!reply.reply || reply.kind != request.kind || reply.request_id != request.request_id) return "reply does not match";
  if (reply.kind == verbs::ucma::Kind::Command && reply.command != request.command) return "reply's command differs";
  if (reply.status > 4095) return "status is not an errno";
  if (reply.body.size() > verbs::ucma::kMaxUcmaBody) return "reply body too long";
  return nullptr;
}

inline const char* open_channel(Host& h, uid_t uid, Instant now) {
  if (h.channels.size() >= 8) return nullptr;
  verbs::control::ReceivedFds fds;
  const verbs::ucma::Frame request{.kind = verbs::ucma::Kind::CreateChannel, .request_id = 7, .body = {}};
  const verbs::ucma::Frame reply = h.service->handle(uid, request, fds, now);
  if (const char* bad = check_reply(request, reply)) return bad;
  if (fds.size() != (reply.status == 0 ? 1u : 0u)) return "a channel's reply without exactly one descriptor";
  if (reply.status != 0) return nullptr;
  h.channels.emplace_back(reply.channel, fds.release(0));
  return nullptr;
}

inline void close_channel(Host& h, std::uint8_t slot, Instant now) {
  if (h.channels.empty()) return;
  int& fd = h.channels[slot % h.channels.size()].second;
  if (fd >= 0) ::close(std::exchange(fd, -1));
  h.watcher.run_ready(now);
}

inline const char* command(Host& h, Reader& r, std::uint32_t request_id, Instant now, std::size_t& succeeded) {
  verbs::ucma::Frame request{.kind = verbs::ucma::Kind::Command, .request_id = request_id, .body = {}};
  request.command = r.byte() % 24;
  request.channel = slot_token(h, r.byte());
  const ByteSpan body = r.take(std::size_t{r.byte()} * 2);
  request.body.assign(body.begin(), body.end());
  const std::uint8_t patch = r.byte();
  const std::uint8_t offset = r.byte();
  if ((patch & 1) != 0 && request.body.size() >= 4) {
    const std::uint32_t id = (patch >> 1) % 8 + 1;
    std::memcpy(request.body.data() + offset % (request.body.size() - 3), &id, sizeof(id));
  }
  request.aux_channel = slot_token(h, r.byte());
  verbs::control::ReceivedFds none;
  const verbs::ucma::Frame reply = h.service->handle((patch & 0x80) != 0 ? 2000 : 1000, request, none, now);
  if (reply.status == 0) ++succeeded;
  return check_reply(request, reply);
}

inline void deliver(std::deque<Mad>& wire, Host& a, Host& b, Reader& r, Instant now) {
  if (wire.empty()) return;
  Mad m = wire.front();
  wire.pop_front();
  const std::uint8_t at = r.byte();
  if ((r.byte() & 1) != 0) m.bytes[at] ^= 0xA5;
  Host& to = m.to == stack::Ipv4Address{0x0A000001} ? a : b;
  const rocev2::ReceivedMad received{.source = m.from,
                                     .udp_source_port = rocev2::kGsiUdpSourcePort,
                                     .source_qp = rocev2::kGsiQpn,
                                     .pkey = rocev2::Pkey{0xFFFF},
                                     .psn = rocev2::Psn{0},
                                     .mad = rocev2::MadSpan(m.bytes.data(), rocev2::kMadLength),
                                     .ipv4_header = {}};
  to.service->cm().on_mad(received, now);
}

inline const char* check_frame_codec(ByteSpan bytes) {
  verbs::ucma::Frame frame;
  for (std::size_t fds = 0; fds <= 1; ++fds) {
    if (verbs::ucma::parse(bytes, fds, frame) != verbs::ucma::DecodeError::None) continue;
    std::vector<std::uint8_t> out(verbs::ucma::kMaxFrameLength);
    const std::size_t n = verbs::ucma::emit(frame, out);
    if (n != bytes.size() || std::memcmp(out.data(), bytes.data(), n) != 0) return "a parsed frame does not emit back";
  }
  return nullptr;
}

// Writes script steps. Ids are predictable: each service numbers its ids 1, 2, ... and a
// host's first channel is slot 0.
class ScriptWriter {
 public:
  std::vector<std::uint8_t> bytes;
  void open(int host) { put(static_cast<std::uint8_t>(host), {0}); }
  template <typename T>
  void command(int host, std::uint32_t cmd, const T& body) {
    static_assert(sizeof(T) % 2 == 0 && sizeof(T) <= 510);
    bytes.push_back(static_cast<std::uint8_t>(host | (1 << 1)));
    bytes.push_back(static_cast<std::uint8_t>(cmd));
    bytes.push_back(0);  // slot 0
    bytes.push_back(static_cast<std::uint8_t>(sizeof(T) / 2));
    const auto* raw = reinterpret_cast<const std::uint8_t*>(&body);
    bytes.insert(bytes.end(), raw, raw + sizeof(T));
    bytes.insert(bytes.end(), {0, 0, 0});  // no patch, offset, aux slot 0
  }
  void deliver(int times) {
    for (int i = 0; i < times; ++i) put(5 << 1, {0, 0});
  }
  void advance(std::uint8_t ticks) { put(6 << 1, {ticks}); }

 private:
  void put(std::uint8_t step, std::initializer_list<std::uint8_t> rest) {
    bytes.push_back(step);
    bytes.insert(bytes.end(), rest);
  }
};

inline sockaddr_in6 seed_address(std::uint32_t ip, std::uint16_t port) {
  sockaddr_in6 storage{};
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  in.sin_addr.s_addr = htonl(ip);
  std::memcpy(&storage, &in, sizeof(in));
  return storage;
}

}  // namespace ucma_fuzz

// A script that connects, exchanges and disconnects as rping does (RC) or udaddy does (UD),
// host 0 listening: the fuzzer's seeds, and a check that the scripts reach the success paths.
inline std::vector<std::uint8_t> ucma_seed_script(bool ud) {
  using ucma_fuzz::ScriptWriter;
  ScriptWriter w;
  const std::uint16_t ps = ud ? RDMA_PS_UDP : RDMA_PS_TCP;
  w.open(0);
  w.open(1);
  w.command(0, RDMA_USER_CM_CMD_CREATE_ID, rdma_ucm_create_id{.uid = 0x10, .response = 0, .ps = ps, .qp_type = 2, .reserved = {}});
  w.command(0, RDMA_USER_CM_CMD_BIND_IP, rdma_ucm_bind_ip{.response = 0, .addr = ucma_fuzz::seed_address(0x0A000001, 7174), .id = 1});
  w.command(0, RDMA_USER_CM_CMD_LISTEN, rdma_ucm_listen{.id = 1, .backlog = 4});
  w.command(1, RDMA_USER_CM_CMD_CREATE_ID, rdma_ucm_create_id{.uid = 0x20, .response = 0, .ps = ps, .qp_type = 2, .reserved = {}});
  rdma_ucm_resolve_ip resolve{};
  resolve.dst_addr = ucma_fuzz::seed_address(0x0A000001, 7174);
  resolve.id = 1;
  resolve.timeout_ms = 2000;
  w.command(1, RDMA_USER_CM_CMD_RESOLVE_IP, resolve);
  w.command(1, RDMA_USER_CM_CMD_GET_EVENT, rdma_ucm_get_event{});
  w.command(1, RDMA_USER_CM_CMD_RESOLVE_ROUTE, rdma_ucm_resolve_route{.id = 1, .timeout_ms = 2000});
  w.command(1, RDMA_USER_CM_CMD_GET_EVENT, rdma_ucm_get_event{});
  w.command(1, RDMA_USER_CM_CMD_INIT_QP_ATTR, rdma_ucm_init_qp_attr{.response = 0, .id = 1, .qp_state = 1});
  rdma_ucm_connect connect{};
  connect.id = 1;
  connect.conn_param.qp_num = 0x11;
  connect.conn_param.responder_resources = 1;
  connect.conn_param.initiator_depth = 1;
  connect.conn_param.retry_count = 7;
  connect.conn_param.rnr_retry_count = 7;
  connect.conn_param.private_data_len = 4;
  connect.conn_param.valid = 1;
  w.command(1, RDMA_USER_CM_CMD_CONNECT, connect);
  w.deliver(1);
  w.command(0, RDMA_USER_CM_CMD_GET_EVENT, rdma_ucm_get_event{});  // CONNECT_REQUEST: id 2
  w.command(0, RDMA_USER_CM_CMD_QUERY_ROUTE, rdma_ucm_query{.response = 0, .id = 2, .option = 0});
  for (std::uint32_t state : {1u, 2u, 3u}) {
    w.command(0, RDMA_USER_CM_CMD_INIT_QP_ATTR, rdma_ucm_init_qp_attr{.response = 0, .id = 2, .qp_state = state});
  }
  rdma_ucm_accept accept{};
  accept.uid = 0x30;
  accept.id = 2;
  accept.conn_param = connect.conn_param;
  accept.conn_param.qp_num = 0x22;
  w.command(0, RDMA_USER_CM_CMD_ACCEPT, accept);
  w.deliver(1);
  w.command(1, RDMA_USER_CM_CMD_GET_EVENT, rdma_ucm_get_event{});  // CONNECT_RESPONSE (RC) / ESTABLISHED (UD)
  if (!ud) {
    for (std::uint32_t state : {2u, 3u}) {
      w.command(1, RDMA_USER_CM_CMD_INIT_QP_ATTR, rdma_ucm_init_qp_attr{.response = 0, .id = 1, .qp_state = state});
    }
    rdma_ucm_accept rtu{};
    rtu.id = 1;
    w.command(1, RDMA_USER_CM_CMD_ACCEPT, rtu);
    w.deliver(1);
    w.command(0, RDMA_USER_CM_CMD_GET_EVENT, rdma_ucm_get_event{});  // ESTABLISHED
    w.command(1, RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{.id = 1});
    w.deliver(1);
    w.command(0, RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{.id = 2});
    w.deliver(1);
    w.advance(40);
  }
  w.command(1, RDMA_USER_CM_CMD_DESTROY_ID, rdma_ucm_destroy_id{.response = 0, .id = 1, .reserved = 0});
  return w.bytes;
}

// `succeeded` (if given) counts the commands answered with status 0.
inline const char* check_ucma(ByteSpan input, std::size_t* succeeded = nullptr) {
  using namespace ucma_fuzz;
  if (!input.empty() && input[0] == 0xFF) return check_frame_codec(input.subspan(1));
  std::deque<Mad> wire;
  Host a(wire, stack::Ipv4Address{0x0A000001}, 1);
  Host b(wire, stack::Ipv4Address{0x0A000002}, 2);
  Instant now{};
  Reader r(input);
  std::uint32_t request_id = 1;
  std::size_t ok = 0;
  for (std::size_t step = 0; step < kMaxUcmaSteps && !r.empty(); ++step) {
    const std::uint8_t s = r.byte();
    Host& h = (s & 1) != 0 ? b : a;
    const char* failed = nullptr;
    switch ((s >> 1) % 8) {
      case 0: failed = open_channel(h, (r.byte() & 1) != 0 ? 2000 : 1000, now); break;
      case 1: case 2: case 3: case 4: failed = command(h, r, request_id++, now, ok); break;
      case 5: deliver(wire, a, b, r, now); break;
      case 6:
        now += std::chrono::milliseconds(64 * std::uint32_t{r.byte()});
        a.service->advance(now);
        b.service->advance(now);
        break;
      case 7: close_channel(h, r.byte(), now); break;
    }
    if (failed != nullptr) return failed;
  }
  // Everything closed, every MAD delivered, timewait (and any resend) over: nothing remains.
  for (Host* h : {&a, &b}) {
    for (std::size_t slot = 0; slot < h->channels.size(); ++slot) close_channel(*h, static_cast<std::uint8_t>(slot), now);
  }
  for (int round = 0; round < 64; ++round) {
    for (int i = 0; i < 512 && !wire.empty(); ++i) {
      Reader none(ByteSpan{});
      deliver(wire, a, b, none, now);
    }
    now += std::chrono::seconds(120);
    a.service->advance(now);
    b.service->advance(now);
  }
  for (Host* h : {&a, &b}) {
    const nlohmann::json listing = h->service->listing();
    if (!listing["ids"].empty()) return "ids outlived their channels";
    if (!listing["listeners"].empty()) return "a listener outlived its channel";
    if (listing["cm_connections"] != 0) return "a CM connection outlived its id and timewait";
    if (h->service->cm().held_request_count() != 0) return "a REQ held for a listener outlived its hold";
    if (h->service->cm().index_entries() != 0) return "a CM index entry outlived its connection";
    if (!h->watcher.watched.empty()) return "a channel is still watched";
    if (h->service->counters().id_transitions_refused != 0) return "an id was asked to change state as cma.c never does";
  }
  if (succeeded != nullptr) *succeeded = ok;
  return nullptr;
}

}  // namespace rrdma::fuzz
