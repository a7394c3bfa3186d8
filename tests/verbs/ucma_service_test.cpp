// The rdma_cm device of the daemon (verbs/device/ucma_service.h) driven as librdmacm drives it:
// ucma command frames in, response structures and events out, two services joined by a MAD
// queue standing in for QP 1 on the wire. What the shim does with the frames is
// tests/ucma's business; here every answer is checked field by field.
#include <sys/socket.h>
#include <unistd.h>

#include <arpa/inet.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <deque>
#include <string>

#include "rocev2/cm/cm.h"
#include "verbs/device/ucma_service.h"
#include "nic_client.h"

namespace rrdma::verbs {
using test::FakeWatcher;

namespace {

namespace cm = rocev2::cm;

const stack::Ipv4Address kServerIp{0x0A000001};  // 10.0.0.1
const stack::Ipv4Address kClientIp{0x0A000002};  // 10.0.0.2

struct Mad {
  stack::Ipv4Address from;
  stack::Ipv4Address to;
  std::array<std::uint8_t, rocev2::kMadLength> bytes;
};

// QP 1 between the hosts: MADs wait here until deliver(); `drop_next` loses some.
struct Wire {
  std::deque<Mad> in_flight;
  int drop_next = 0;
};

class QueueSink final : public cm::CmMadSink {
 public:
  QueueSink(Wire& wire, stack::Ipv4Address self) : wire_(wire), self_(self) {}
  void send_cm_mad(stack::Ipv4Address destination, rocev2::MadSpan mad, Instant) override {
    if (wire_.drop_next > 0) {
      --wire_.drop_next;
      return;
    }
    Mad m{self_, destination, {}};
    std::memcpy(m.bytes.data(), mad.data(), mad.size());
    wire_.in_flight.push_back(m);
  }

 private:
  Wire& wire_;
  stack::Ipv4Address self_;
};

class FixedResolver final : public AddressResolver {
 public:
  Reach answer = Reach::reachable;
  Reach reach(stack::Ipv4Address, Instant) override { return answer; }
};

struct Host {
  Host(Wire& wire, stack::Ipv4Address ip, std::uint8_t mac_low)
      : sink(wire, ip), service(config_for(ip, mac_low), sink, resolver, watcher) {}
  Host(Wire& wire, const UcmaConfig& config) : sink(wire, config.address), service(config, sink, resolver, watcher) {}

  static UcmaConfig config_for(stack::Ipv4Address ip, std::uint8_t mac_low) {
    UcmaConfig c;
    c.address = ip;
    c.node_guid = 0x0200'00FF'FE00'0000ull | mac_low;
    c.netdev_mtu = 1500;
    c.cm.local_ca_guid = c.node_guid;
    c.cm.local_address = ip;
    c.cm.tid_high = mac_low;
    c.cm.first_comm_id = 0x100u * mac_low;
    return c;
  }

  // A channel as the shim opens it: returns the application's end; `token` set.
  int open_channel(uid_t uid = 1000) {
    const int fd = try_open_channel(uid);
    REQUIRE(fd >= 0);
    return fd;
  }

  // -errno when the service refuses the channel.
  int try_open_channel(uid_t uid) {
    control::ReceivedFds fds;
    const ucma::Frame reply = service.handle(uid, ucma::Frame{.kind = ucma::Kind::CreateChannel, .body = {}}, fds, now);
    if (reply.status != 0) {
      REQUIRE(fds.size() == 0);
      return -static_cast<int>(reply.status);
    }
    REQUIRE(reply.channel != 0);
    REQUIRE(fds.size() == 1);
    token = reply.channel;
    if (app_fd >= 0) extra_fds.push_back(app_fd);
    app_fd = fds.release(0);
    return app_fd;
  }

  template <typename T>
  ucma::Frame command(std::uint32_t cmd, const T& body, uid_t uid = 1000, std::uint64_t channel = 0) {
    ucma::Frame request{.kind = ucma::Kind::Command, .command = cmd, .channel = channel ? channel : token, .body = {}};
    request.body.resize(sizeof(T));
    std::memcpy(request.body.data(), &body, sizeof(T));
    control::ReceivedFds none;
    return service.handle(uid, request, none, now);
  }

  template <typename R>
  R response(const ucma::Frame& reply) {
    REQUIRE(reply.status == 0);
    REQUIRE(reply.body.size() == sizeof(R));
    R r;
    std::memcpy(&r, reply.body.data(), sizeof(R));
    return r;
  }

  std::uint32_t create_id(std::uint64_t uid, std::uint16_t ps = RDMA_PS_TCP) {
    rdma_ucm_create_id c{};
    c.uid = uid;
    c.ps = ps;
    c.qp_type = ps == RDMA_PS_UDP ? 4 : 2;
    return response<rdma_ucm_create_id_resp>(command(RDMA_USER_CM_CMD_CREATE_ID, c)).id;
  }

  // The marker protocol: one byte per queued event on the application's end.
  bool marker_waiting() {
    char byte;
    return ::recv(app_fd, &byte, 1, MSG_DONTWAIT | MSG_PEEK) == 1;
  }

  // GET_EVENT as the shim does it: a marker, then the command.
  rdma_ucm_event_resp next_event() {
    char byte;
    REQUIRE(::recv(app_fd, &byte, 1, MSG_DONTWAIT) == 1);
    return response<rdma_ucm_event_resp>(command(RDMA_USER_CM_CMD_GET_EVENT, rdma_ucm_get_event{}));
  }

  ~Host() {
    if (app_fd >= 0) ::close(app_fd);
    for (int fd : extra_fds) ::close(fd);
  }

  FakeWatcher watcher;
  FixedResolver resolver;
  QueueSink sink;
  UcmaService service;
  Instant now{};
  std::uint64_t token = 0;
  int app_fd = -1;
  std::vector<int> extra_fds;  // earlier channels' application ends
};

sockaddr_in6 ipv4_address(stack::Ipv4Address ip, std::uint16_t port) {
  sockaddr_in6 storage{};
  sockaddr_in in{};
  in.sin_family = AF_INET;
  in.sin_port = htons(port);
  in.sin_addr.s_addr = htonl(ip.value);
  std::memcpy(&storage, &in, sizeof(in));
  return storage;
}

stack::Ipv4Address ip_of(const sockaddr_in6& storage, std::uint16_t& port) {
  sockaddr_in in{};
  std::memcpy(&in, &storage, sizeof(in));
  REQUIRE(in.sin_family == AF_INET);
  port = ntohs(in.sin_port);
  return stack::Ipv4Address{ntohl(in.sin_addr.s_addr)};
}

struct Pair {
  Wire wire;
  Host server{wire, kServerIp, 1};
  Host client{wire, kClientIp, 2};

  // Hands every MAD in flight to its destination's CM (and what that sends, until quiet).
  void deliver() {
    for (int rounds = 0; rounds < 100 && !wire.in_flight.empty(); ++rounds) {
      const Mad m = wire.in_flight.front();
      wire.in_flight.pop_front();
      Host& to = m.to == kServerIp ? server : client;
      const rocev2::ReceivedMad received{.source = m.from,
                                         .udp_source_port = rocev2::kGsiUdpSourcePort,
                                         .source_qp = rocev2::kGsiQpn,
                                         .pkey = rocev2::Pkey{0xFFFF},
                                         .psn = rocev2::Psn{0},
                                         .mad = rocev2::MadSpan(m.bytes.data(), rocev2::kMadLength),
                                         .ipv4_header = {}};
      to.service.cm().on_mad(received, to.now);
    }
  }

  std::uint32_t listen(std::uint16_t port, std::uint16_t ps = RDMA_PS_TCP, std::uint32_t backlog = 3) {
    server.open_channel();
    const std::uint32_t id = server.create_id(0x1000, ps);
    rdma_ucm_bind_ip bind{};
    bind.addr = ipv4_address(kServerIp, port);
    bind.id = id;
    REQUIRE(server.command(RDMA_USER_CM_CMD_BIND_IP, bind).status == 0);
    REQUIRE(server.command(RDMA_USER_CM_CMD_LISTEN, rdma_ucm_listen{.id = id, .backlog = backlog}).status == 0);
    return id;
  }

  // The client's id through ADDR_RESOLVED and ROUTE_RESOLVED.
  std::uint32_t resolve(std::uint16_t port, std::uint16_t ps = RDMA_PS_TCP) {
    client.open_channel();
    return resolve_id(client.create_id(0x2000, ps), 0x2000, port);
  }

  // An id of the client's channel (whose uid is `uid`) through ADDR_RESOLVED and ROUTE_RESOLVED.
  std::uint32_t resolve_id(std::uint32_t id, std::uint64_t uid, std::uint16_t port) {
    rdma_ucm_resolve_ip r{};
    r.dst_addr = ipv4_address(kServerIp, port);
    r.id = id;
    r.timeout_ms = 2000;
    REQUIRE(client.command(RDMA_USER_CM_CMD_RESOLVE_IP, r).status == 0);
    const auto resolved = client.next_event();
    REQUIRE(resolved.event == ucma::kAddrResolved);
    REQUIRE(resolved.uid == uid);
    REQUIRE(client.command(RDMA_USER_CM_CMD_RESOLVE_ROUTE, rdma_ucm_resolve_route{.id = id, .timeout_ms = 2000}).status == 0);
    REQUIRE(client.next_event().event == ucma::kRouteResolved);
    return id;
  }

  ucma::Frame connect(std::uint32_t id, std::uint32_t qpn, const std::string& text = "hello") {
    rdma_ucm_connect c{};
    c.id = id;
    c.conn_param.qp_num = qpn;
    c.conn_param.responder_resources = 1;
    c.conn_param.initiator_depth = 1;
    c.conn_param.retry_count = 7;
    c.conn_param.rnr_retry_count = 7;
    c.conn_param.valid = 1;
    std::memcpy(c.conn_param.private_data, text.data(), text.size());
    c.conn_param.private_data_len = static_cast<std::uint8_t>(text.size());
    return client.command(RDMA_USER_CM_CMD_CONNECT, c);
  }
};

ib_uverbs_qp_attr init_qp_attr(Host& h, std::uint32_t id, rocev2::QpState state) {
  rdma_ucm_init_qp_attr c{};
  c.id = id;
  c.qp_state = static_cast<std::uint32_t>(state);
  return h.response<ib_uverbs_qp_attr>(h.command(RDMA_USER_CM_CMD_INIT_QP_ATTR, c));
}

ucma::Frame accept_passive(Host& h, std::uint32_t id, std::uint64_t uid, std::uint32_t qpn) {
  rdma_ucm_accept a{};
  a.uid = uid;
  a.id = id;
  a.conn_param.qp_num = qpn;
  a.conn_param.responder_resources = 1;
  a.conn_param.initiator_depth = 1;
  a.conn_param.rnr_retry_count = 7;
  a.conn_param.valid = 1;
  return h.command(RDMA_USER_CM_CMD_ACCEPT, a);
}

// CONNECT, the passive ACCEPT, the active side's RTU, up to the passive side's ESTABLISHED:
// returns the passive id.
std::uint32_t establish(Pair& p, std::uint32_t active) {
  REQUIRE(p.connect(active, 0x11).status == 0);
  p.deliver();
  const std::uint32_t passive = p.server.next_event().id;
  REQUIRE(accept_passive(p.server, passive, 0x3000, 0x22).status == 0);
  p.deliver();
  REQUIRE(p.client.next_event().event == ucma::kConnectResponse);
  rdma_ucm_accept rtu{};
  rtu.id = active;
  REQUIRE(p.client.command(RDMA_USER_CM_CMD_ACCEPT, rtu).status == 0);
  p.deliver();
  REQUIRE(p.server.next_event().event == ucma::kEstablished);
  return passive;
}

}  // namespace

TEST_CASE("ucma: an RC connection from CONNECT to TIMEWAIT_EXIT, as rping makes it", "[ucma]") {
  Pair p;
  const std::uint32_t listener = p.listen(7174);
  const std::uint32_t active = p.resolve(7174);

  // Before the connection exists, INIT gives access 0 (cma_ib_init_qp_attr).
  const auto init0 = init_qp_attr(p.client, active, rocev2::QpState::Init);
  CHECK((init0.qp_attr_mask & rocev2::qp_attr::kAccessFlags) != 0);
  CHECK(init0.qp_access_flags == 0);
  CHECK(init0.port_num == 1);

  // A CONNECT that ends before its ECE (a librdmacm from before ECE) is taken as the kernel
  // takes it; one shorter still is not.
  rdma_ucm_connect c{};
  c.id = active;
  c.conn_param.qp_num = 0x11;
  c.conn_param.responder_resources = 1;
  c.conn_param.initiator_depth = 1;
  c.conn_param.retry_count = 7;
  c.conn_param.rnr_retry_count = 7;
  c.conn_param.valid = 1;
  std::memcpy(c.conn_param.private_data, "hello", 5);
  c.conn_param.private_data_len = 5;
  ucma::Frame truncated{.kind = ucma::Kind::Command, .command = RDMA_USER_CM_CMD_CONNECT, .channel = p.client.token,
                        .body = std::vector<std::uint8_t>(offsetof(rdma_ucm_connect, ece) - 1)};
  std::memcpy(truncated.body.data(), &c, truncated.body.size());
  control::ReceivedFds none;
  CHECK(p.client.service.handle(1000, truncated, none, p.client.now).status == EINVAL);
  truncated.body.resize(offsetof(rdma_ucm_connect, ece));
  std::memcpy(truncated.body.data(), &c, truncated.body.size());
  REQUIRE(p.client.service.handle(1000, truncated, none, p.client.now).status == 0);
  REQUIRE(p.wire.in_flight.size() == 1);
  p.deliver();

  REQUIRE(p.server.marker_waiting());
  const auto request = p.server.next_event();
  CHECK(request.event == ucma::kConnectRequest);
  CHECK(request.uid == 0x1000);  // the listener's
  const std::uint32_t passive = request.id;
  CHECK(passive != listener);
  CHECK(request.param.conn.qp_num == 0x11);
  CHECK(request.param.conn.private_data_len == cm::kReqUserDataLength);
  CHECK(std::memcmp(request.param.conn.private_data, "hello", 5) == 0);
  CHECK(request.param.conn.responder_resources == 1);
  CHECK(request.param.conn.initiator_depth == 1);

  // The new id knows both ends from the CMA header and is on the device.
  rdma_ucm_query q{};
  q.id = passive;
  const auto route = p.server.response<rdma_ucm_query_route_resp>(p.server.command(RDMA_USER_CM_CMD_QUERY_ROUTE, q));
  std::uint16_t local_port = 0, peer_port = 0;
  CHECK(ip_of(route.src_addr, local_port) == kServerIp);
  CHECK(local_port == 7174);
  CHECK(ip_of(route.dst_addr, peer_port) == kClientIp);
  CHECK(peer_port >= 32768);
  CHECK(route.node_guid == htobe64(0x0200'00FF'FE00'0001ull));
  CHECK(route.num_paths == 1);

  const auto s_init = init_qp_attr(p.server, passive, rocev2::QpState::Init);
  CHECK(s_init.qp_access_flags == (rocev2::access::kRemoteWrite | rocev2::access::kRemoteRead | rocev2::access::kRemoteAtomic));
  const auto s_rtr = init_qp_attr(p.server, passive, rocev2::QpState::Rtr);
  CHECK(s_rtr.dest_qp_num == 0x11);
  CHECK(s_rtr.path_mtu == 3);  // 1024 at a 1500-byte netdev MTU
  CHECK(s_rtr.ah_attr.is_global == 1);
  CHECK(s_rtr.ah_attr.grh.dgid[10] == 0xFF);
  CHECK(s_rtr.ah_attr.grh.dgid[15] == 2);
  const auto s_rts = init_qp_attr(p.server, passive, rocev2::QpState::Rts);
  CHECK(s_rts.timeout == cm::kAvTimeout);
  CHECK(s_rts.retry_cnt == 7);

  REQUIRE(accept_passive(p.server, passive, 0x3000, 0x22).status == 0);
  p.deliver();

  const auto response = p.client.next_event();
  CHECK(response.event == ucma::kConnectResponse);
  CHECK(response.uid == 0x2000);
  CHECK(response.param.conn.qp_num == 0x22);
  const auto c_rtr = init_qp_attr(p.client, active, rocev2::QpState::Rtr);
  const auto c_rts = init_qp_attr(p.client, active, rocev2::QpState::Rts);
  CHECK(c_rtr.dest_qp_num == 0x22);
  // Each side sends from the PSN the other expects.
  CHECK(c_rts.sq_psn == s_rtr.rq_psn);
  CHECK(s_rts.sq_psn == c_rtr.rq_psn);

  rdma_ucm_accept rtu{};
  rtu.id = active;
  REQUIRE(p.client.command(RDMA_USER_CM_CMD_ACCEPT, rtu).status == 0);
  p.deliver();
  const auto established = p.server.next_event();
  CHECK(established.event == ucma::kEstablished);
  CHECK(established.uid == 0x3000);  // what ACCEPT set
  CHECK_FALSE(p.client.marker_waiting());  // librdmacm reports ESTABLISHED to the active side itself

  REQUIRE(p.client.command(RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{.id = active}).status == 0);
  p.deliver();
  const auto server_down = p.server.next_event();
  CHECK(server_down.event == ucma::kDisconnected);
  REQUIRE(p.server.command(RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{.id = passive}).status == 0);
  p.deliver();
  CHECK(p.client.next_event().event == ucma::kDisconnected);
  for (Host* h : {&p.server, &p.client}) {
    h->now += cm::kTimewait;
    h->service.advance(h->now);
    CHECK(h->next_event().event == ucma::kTimewaitExit);
  }

  // events_reported counts what GET_EVENT gave for each id; the request counts for the listener.
  rdma_ucm_destroy_id d{};
  d.id = passive;
  CHECK(p.server.response<rdma_ucm_destroy_id_resp>(p.server.command(RDMA_USER_CM_CMD_DESTROY_ID, d)).events_reported == 3);
  d.id = listener;
  CHECK(p.server.response<rdma_ucm_destroy_id_resp>(p.server.command(RDMA_USER_CM_CMD_DESTROY_ID, d)).events_reported == 1);
  d.id = active;
  CHECK(p.client.response<rdma_ucm_destroy_id_resp>(p.client.command(RDMA_USER_CM_CMD_DESTROY_ID, d)).events_reported == 5);
  CHECK(p.server.command(RDMA_USER_CM_CMD_DESTROY_ID, d).status == EINVAL);  // not the server's id
}

TEST_CASE("ucma: a REQ for a port nobody listens on comes back REJECTED 8 after the CM's hold", "[ucma]") {
  Pair p;
  p.server.open_channel();
  const std::uint32_t active = p.resolve(9999);
  REQUIRE(p.connect(active, 0x11).status == 0);
  p.deliver();
  CHECK_FALSE(p.client.marker_waiting());  // held for a listener (cm::kNoListenerHold)
  p.server.now += cm::kNoListenerHold;
  REQUIRE(p.server.service.next_deadline() == p.server.now);
  p.server.service.advance(p.server.now);
  p.deliver();
  const auto rejected = p.client.next_event();
  CHECK(rejected.event == ucma::kRejected);
  CHECK(rejected.status == 8);
  CHECK(rejected.uid == 0x2000);
}

TEST_CASE("ucma: a second bind of a taken port is refused as the kernel refuses it, and the port is free once destroyed", "[ucma]") {
  Pair p;
  const std::uint32_t first = p.listen(7174);
  const std::uint32_t second = p.server.create_id(0x5000);
  rdma_ucm_bind_ip bind{};
  bind.addr = ipv4_address(kServerIp, 7174);  // the same address and port
  bind.id = second;
  CHECK(p.server.command(RDMA_USER_CM_CMD_BIND_IP, bind).status == EADDRINUSE);
  bind.addr = ipv4_address(stack::Ipv4Address{0}, 7174);  // INADDR_ANY: EADDRNOTAVAIL, as cma_check_port
  CHECK(p.server.command(RDMA_USER_CM_CMD_BIND_IP, bind).status == EADDRNOTAVAIL);
  bind.addr = ipv4_address(kServerIp, 1023);  // a privileged port, for a user who is not root
  CHECK(p.server.command(RDMA_USER_CM_CMD_BIND_IP, bind).status == EACCES);
  bind.addr = ipv4_address(stack::Ipv4Address{0x0A000063}, 7175);  // not the vnic's address
  CHECK(p.server.command(RDMA_USER_CM_CMD_BIND_IP, bind).status == EADDRNOTAVAIL);
  rdma_ucm_destroy_id d{};
  d.id = first;
  REQUIRE(p.server.command(RDMA_USER_CM_CMD_DESTROY_ID, d).status == 0);
  bind.addr = ipv4_address(kServerIp, 7174);
  CHECK(p.server.command(RDMA_USER_CM_CMD_BIND_IP, bind).status == 0);
  CHECK(p.server.command(RDMA_USER_CM_CMD_LISTEN, rdma_ucm_listen{.id = second, .backlog = 1}).status == 0);
}

TEST_CASE("ucma: closing a channel destroys its ids: a connected peer sees DISCONNECTED", "[ucma]") {
  Pair p;
  p.listen(7174);
  establish(p, p.resolve(7174));

  // Bytes written on the application's end (an untracked dup of the descriptor) are
  // discarded; the channel lives on.
  REQUIRE(::send(p.client.app_fd, "junk", 4, 0) == 4);
  REQUIRE(p.client.watcher.run_ready());
  CHECK(p.client.service.counters().channels_closed == 0);

  // The client process dies: its end of the channel closes, the daemon reads EOF.
  ::close(std::exchange(p.client.app_fd, -1));
  REQUIRE(p.client.watcher.run_ready());
  CHECK(p.client.service.counters().channels_closed == 1);
  p.client.service.advance(p.client.now);  // the ids go on the loop's next turn
  p.deliver();
  CHECK(p.server.next_event().event == ucma::kDisconnected);
}

TEST_CASE("ucma: an address nobody answers ARP for is ADDR_ERROR -ETIMEDOUT after the timeout", "[ucma]") {
  Pair p;
  p.client.open_channel();
  p.client.resolver.answer = AddressResolver::Reach::resolving;
  const std::uint32_t id = p.client.create_id(0x2000);
  rdma_ucm_resolve_ip r{};
  r.dst_addr = ipv4_address(stack::Ipv4Address{0x0A000063}, 7174);
  r.id = id;
  r.timeout_ms = 2000;
  REQUIRE(p.client.command(RDMA_USER_CM_CMD_RESOLVE_IP, r).status == 0);
  CHECK_FALSE(p.client.marker_waiting());
  p.client.now += std::chrono::milliseconds(1999);
  p.client.service.advance(p.client.now);
  CHECK_FALSE(p.client.marker_waiting());
  p.client.now += std::chrono::milliseconds(1);
  p.client.service.advance(p.client.now);
  const auto error = p.client.next_event();
  CHECK(error.event == ucma::kAddrError);
  CHECK(static_cast<std::int32_t>(error.status) == -ETIMEDOUT);
}

TEST_CASE("ucma: UD ids resolve each other's QP with SIDR, as udaddy does", "[ucma]") {
  Pair p;
  p.listen(7174, RDMA_PS_UDP);
  const std::uint32_t active = p.resolve(7174, RDMA_PS_UDP);
  const auto init = init_qp_attr(p.client, active, rocev2::QpState::Init);
  CHECK((init.qp_attr_mask & rocev2::qp_attr::kQkey) != 0);
  CHECK(init.qkey == 0x01234567);
  REQUIRE(p.connect(active, 0x44, "udaddy").status == 0);
  p.deliver();
  const auto request = p.server.next_event();
  REQUIRE(request.event == ucma::kConnectRequest);
  CHECK(request.param.ud.private_data_len == cm::kSidrReqUserDataLength);
  CHECK(std::memcmp(request.param.ud.private_data, "udaddy", 6) == 0);
  // cma_ib_req_handler gives a SIDR_REQ's CONNECT_REQUEST no address vector (all zero, port 0
  // included): a UD server learns its client's address from the first receive.
  const ib_uverbs_ah_attr no_ah{};
  CHECK(std::memcmp(&request.param.ud.ah_attr, &no_ah, sizeof(no_ah)) == 0);
  rdma_ucm_accept a{};
  a.uid = 0x3000;
  a.id = request.id;
  a.conn_param.qp_num = 0x55;
  a.conn_param.valid = 1;
  REQUIRE(p.server.command(RDMA_USER_CM_CMD_ACCEPT, a).status == 0);
  p.deliver();
  const auto established = p.client.next_event();
  CHECK(established.event == ucma::kEstablished);
  CHECK(established.param.ud.qp_num == 0x55);
  CHECK(established.param.ud.qkey == 0x01234567);
  // cma_sidr_rep_handler: ib_init_ah_attr_from_path of the RoCE route, which has a GRH (what
  // ibv_create_ah needs on RoCE): the peer's IPv4-mapped GID, hop limit 64, GID 0, port 1.
  const ib_uverbs_ah_attr& ah = established.param.ud.ah_attr;
  CHECK(ah.is_global == 1);
  CHECK(ah.port_num == 1);
  CHECK(ah.dlid == 0);
  CHECK(ah.grh.sgid_index == 0);
  CHECK(ah.grh.hop_limit == 64);
  CHECK(ah.grh.dgid[10] == 0xFF);
  CHECK(ah.grh.dgid[11] == 0xFF);
  CHECK(ah.grh.dgid[15] == 1);
}

TEST_CASE("ucma: destroying a listener takes its unfetched requests with it (REJ 28 to the peer)", "[ucma]") {
  Pair p;
  const std::uint32_t listener = p.listen(7174);
  const std::uint32_t active = p.resolve(7174);
  REQUIRE(p.connect(active, 0x11).status == 0);
  p.deliver();
  REQUIRE(p.server.marker_waiting());
  rdma_ucm_destroy_id d{};
  d.id = listener;
  CHECK(p.server.response<rdma_ucm_destroy_id_resp>(p.server.command(RDMA_USER_CM_CMD_DESTROY_ID, d)).events_reported == 0);
  CHECK(p.server.service.counters().events_purged == 1);
  // The stale marker is answered "nothing" (EAGAIN): the shim then waits for the next one.
  char byte;
  REQUIRE(::recv(p.server.app_fd, &byte, 1, MSG_DONTWAIT) == 1);
  CHECK(p.server.command(RDMA_USER_CM_CMD_GET_EVENT, rdma_ucm_get_event{}).status == EAGAIN);
  p.deliver();
  const auto rejected = p.client.next_event();
  CHECK(rejected.event == ucma::kRejected);
  CHECK(rejected.status == 28);
}

TEST_CASE("ucma: a full backlog drops a request without a REJ, and the resent REQ finds room", "[ucma]") {
  Pair p;
  p.listen(7174, RDMA_PS_TCP, 1);
  const std::uint32_t first = p.resolve(7174);
  REQUIRE(p.connect(first, 0x11).status == 0);
  p.deliver();
  // A second client id on the same channel, to the same listener.
  const std::uint32_t second = p.resolve_id(p.client.create_id(0x2001), 0x2001, 7174);
  REQUIRE(p.connect(second, 0x12).status == 0);
  p.deliver();
  CHECK(p.server.service.counters().connect_requests_dropped_backlog == 1);
  CHECK(p.wire.in_flight.empty());  // no REJ
  REQUIRE(p.server.next_event().event == ucma::kConnectRequest);  // fetching frees the slot
  p.client.now += cm::kReqResendInterval;
  p.client.service.advance(p.client.now);
  p.deliver();
  const auto second_request = p.server.next_event();
  CHECK(second_request.event == ucma::kConnectRequest);
  CHECK(second_request.param.conn.qp_num == 0x12);
}

TEST_CASE("ucma: a user's channels and a channel's ids are bounded", "[ucma]") {
  Wire wire;
  UcmaConfig config = Host::config_for(kServerIp, 1);
  config.max_channels_per_uid = 3;
  config.max_ids_per_channel = 2;
  Host h(wire, config);
  for (int i = 0; i < 3; ++i) REQUIRE(h.try_open_channel(1000) >= 0);
  CHECK(h.try_open_channel(1000) == -EMFILE);
  CHECK(h.service.counters().channels_refused == 1);
  h.create_id(1);
  h.create_id(2);
  rdma_ucm_create_id c{};
  c.uid = 3;
  c.ps = RDMA_PS_TCP;
  CHECK(h.command(RDMA_USER_CM_CMD_CREATE_ID, c).status == ENOMEM);
  rdma_ucm_destroy_id d{};
  d.id = 1;
  REQUIRE(h.command(RDMA_USER_CM_CMD_DESTROY_ID, d).status == 0);
  CHECK(h.command(RDMA_USER_CM_CMD_CREATE_ID, c).status == 0);
  CHECK(h.try_open_channel(2000) >= 0);  // another user's budget
}

TEST_CASE("ucma: hostile and foreign commands are refused, not obeyed", "[ucma]") {
  Pair p;
  p.server.open_channel(1000);
  const std::uint32_t id = p.server.create_id(0x1000);
  // Another user's command naming this channel.
  CHECK(p.server.command(RDMA_USER_CM_CMD_LISTEN, rdma_ucm_listen{.id = id, .backlog = 1}, 2000).status == EACCES);
  // A body shorter than the command's structure.
  ucma::Frame shorty{.kind = ucma::Kind::Command, .command = RDMA_USER_CM_CMD_CONNECT, .channel = p.server.token,
                     .body = std::vector<std::uint8_t>(10)};
  control::ReceivedFds none;
  CHECK(p.server.service.handle(1000, shorty, none, p.server.now).status == EINVAL);
  // Unknown commands, multicast, AF_IB.
  CHECK(p.server.command(77, rdma_ucm_listen{}).status == ENOSYS);
  CHECK(p.server.command(RDMA_USER_CM_CMD_JOIN_MCAST, rdma_ucm_join_mcast{}).status == ENOSYS);
  rdma_ucm_bind b{};
  b.id = id;
  b.addr_size = sizeof(b.addr);
  b.addr.ss_family = 27;  // AF_IB
  CHECK(p.server.command(RDMA_USER_CM_CMD_BIND, b).status == EAFNOSUPPORT);
  // A channel token nobody was given.
  CHECK(p.server.command(RDMA_USER_CM_CMD_LISTEN, rdma_ucm_listen{.id = id, .backlog = 1}, 1000, 12345).status == EBADF);
  // GET_EVENT with nothing queued.
  CHECK(p.server.command(RDMA_USER_CM_CMD_GET_EVENT, rdma_ucm_get_event{}).status == EAGAIN);
}

}  // namespace rrdma::verbs

namespace rrdma::verbs {

TEST_CASE("ucma: a SIDR request to a port only an RC listener has is UNREACHABLE, and a second DISCONNECT succeeds", "[ucma]") {
  Pair p;
  p.listen(7174, RDMA_PS_TCP);
  // A UDP-space id to the same port number is another service ID: nobody listens there.
  const std::uint32_t ud = p.resolve(7174, RDMA_PS_UDP);
  REQUIRE(p.connect(ud, 0x44).status == 0);
  p.deliver();
  const auto unreachable = p.client.next_event();
  CHECK(unreachable.event == ucma::kUnreachable);
  CHECK(unreachable.status == static_cast<std::uint32_t>(cm::SidrStatus::ServiceIdNotSupported));

  // An RC connection, disconnected twice from the active side, and once more after timewait:
  // rdma_disconnect has nothing left to send, and says 0 as the kernel does.
  const std::uint32_t rc = p.resolve_id(p.client.create_id(0x2100), 0x2100, 7174);
  establish(p, rc);
  CHECK(p.client.command(RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{.id = rc}).status == 0);
  CHECK(p.client.command(RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{.id = rc}).status == 0);
  p.deliver();
  CHECK(p.client.command(RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{.id = rc}).status == 0);
  // An id with no connection at all has nothing to disconnect.
  const std::uint32_t idle = p.client.create_id(0x2200);
  CHECK(p.client.command(RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{.id = idle}).status == EINVAL);
}

TEST_CASE("ucma: TIMEWAIT_EXIT follows a disconnect only, not a REJ", "[ucma]") {
  Pair p;
  p.listen(7174);
  const std::uint32_t active = p.resolve(7174);
  REQUIRE(p.connect(active, 0x11).status == 0);
  p.deliver();
  const std::uint32_t passive = p.server.next_event().id;
  REQUIRE(accept_passive(p.server, passive, 0x3000, 0x22).status == 0);
  p.deliver();
  REQUIRE(p.client.next_event().event == ucma::kConnectResponse);
  // The active side rejects the REP: the passive side sees REJECTED, enters timewait, and
  // the end of timewait is not reported (cma_ib_handler reports it in DISCONNECT only).
  rdma_ucm_reject reject{};
  reject.id = active;
  REQUIRE(p.client.command(RDMA_USER_CM_CMD_REJECT, reject).status == 0);
  p.deliver();
  const auto rejected = p.server.next_event();
  CHECK(rejected.event == ucma::kRejected);
  CHECK(rejected.status == 28);
  for (Host* h : {&p.server, &p.client}) {
    h->now += cm::kTimewait + std::chrono::milliseconds(1);
    h->service.advance(h->now);
    CHECK_FALSE(h->marker_waiting());
  }
}

}  // namespace rrdma::verbs

namespace rrdma::verbs {

// Issue 27 item 9: a peer's REQ or SIDR_REQ to a listening port whose CMA header names an
// address that is not the vnic's is refused, and nothing of it stays behind: 30,000 such
// REQs left 26,826 connections in the CM before.
TEST_CASE("ucma: REQs and SIDR_REQs naming another address are refused and leave no connection", "[ucma][hostile]") {
  Pair p;
  p.listen(7174, RDMA_PS_TCP);
  p.listen(7175, RDMA_PS_UDP);
  const stack::Ipv4Address elsewhere{0x0A0000FE};  // 10.0.0.254, not the server's
  cm::ConnectionManager& peer = p.client.service.cm();
  constexpr int kRequests = 500;
  std::size_t rejs = 0;
  for (int i = 0; i < kRequests; ++i) {
    std::array<std::uint8_t, cm::kSidrReqUserDataLength + cm::kCmaHeaderLength> data{};
    const cm::CmaHeader header = cm::cma_header_ipv4(kClientIp, static_cast<std::uint16_t>(40000 + i), elsewhere);
    const bool sidr = i % 2 == 1;
    const std::size_t field = (sidr ? cm::kSidrReqUserDataLength : cm::kReqUserDataLength) + cm::kCmaHeaderLength;
    REQUIRE(cm::emit_cma_private_data(header, {}, MutableByteSpan(data.data(), field)) == cm::CmaError::none);
    cm::ConnectionId c{};
    if (sidr) {
      REQUIRE(peer.sidr_request({.destination = kServerIp,
                                 .service_id = cm::ip_service_id(cm::PortSpace::Udp, 7175),
                                 .private_data = ByteSpan(data.data(), field)},
                                p.client.now, c) == cm::CmResult::ok);
    } else {
      REQUIRE(peer.connect({.destination = kServerIp,
                            .service_id = cm::ip_service_id(cm::PortSpace::Tcp, 7174),
                            .local_qpn = rocev2::Qpn{static_cast<std::uint32_t>(0x100 + i)},
                            .private_data = ByteSpan(data.data(), field)},
                           p.client.now, c) == cm::CmResult::ok);
    }
    const std::size_t before = peer.counters().rx_by_message[*cm::message_index(cm::AttributeId::Rej)] +
                               peer.counters().rx_by_message[*cm::message_index(cm::AttributeId::SidrRep)];
    p.deliver();
    rejs += peer.counters().rx_by_message[*cm::message_index(cm::AttributeId::Rej)] +
            peer.counters().rx_by_message[*cm::message_index(cm::AttributeId::SidrRep)] - before;
  }
  CHECK(rejs == kRequests);  // each answered (REJ 28, SIDR_REP status 2)
  CHECK(p.server.service.counters().connect_requests_rejected_address == kRequests);
  CHECK(p.server.service.cm().connection_count() == 0);
  CHECK(p.server.service.cm().index_entries() == 0);
  CHECK(p.server.service.listing()["cm_connections"] == 0);
  CHECK_FALSE(p.server.marker_waiting());  // no CONNECT_REQUEST reached the listeners
}

}  // namespace rrdma::verbs

namespace rrdma::verbs {

// Issue 27 item 2 (perftest -R): the server destroys its listener as it accepts, and listens
// again on the same port; the client's next REQ, there first, is held and served.
TEST_CASE("ucma: a REQ that arrives before the server listens again becomes its CONNECT_REQUEST", "[ucma]") {
  Pair p;
  p.server.open_channel();
  const std::uint32_t active = p.resolve(7174);
  REQUIRE(p.connect(active, 0x11).status == 0);
  p.deliver();
  CHECK_FALSE(p.client.marker_waiting());
  p.server.now += std::chrono::milliseconds(200);
  p.server.service.advance(p.server.now);
  const std::uint32_t listener = p.listen(7174);
  const auto request = p.server.next_event();
  CHECK(request.event == ucma::kConnectRequest);
  CHECK(request.uid == 0x1000);
  CHECK(request.id != listener);
  REQUIRE(accept_passive(p.server, request.id, 0x3000, 0x22).status == 0);
  p.deliver();
  CHECK(p.client.next_event().event == ucma::kConnectResponse);
  CHECK(p.server.service.cm().counters().req_held_served == 1);
}

// Issue 27 item 11: an id whose address resolution fails at once can be resolved again and
// again; each try queued an ADDR_ERROR nobody read (a million of them, 300 MB). The channel's
// queue is bounded (default 1024): the command that would queue one more is refused.
TEST_CASE("ucma: unread events on a channel are bounded, the resolve that would queue one more gets ENOMEM",
          "[ucma][limits]") {
  Wire wire;
  Host h(wire, kClientIp, 2);
  h.resolver.answer = AddressResolver::Reach::unroutable;
  h.open_channel();
  const std::uint32_t id = h.create_id(0x2000);
  rdma_ucm_resolve_ip r{};
  r.dst_addr = ipv4_address(kServerIp, 7174);
  r.id = id;
  r.timeout_ms = 2000;
  int accepted = 0, refused = 0;
  for (int i = 0; i < 3000; ++i) {
    const std::uint32_t status = h.command(RDMA_USER_CM_CMD_RESOLVE_IP, r).status;
    accepted += status == 0;
    refused += status == ENOMEM;
  }
  CHECK(accepted == 1024);
  CHECK(refused == 3000 - 1024);
  CHECK(h.service.counters().events_queued == 1024);
  // Reading one makes room for one more.
  CHECK(h.next_event().event == ucma::kAddrError);
  CHECK(h.command(RDMA_USER_CM_CMD_RESOLVE_IP, r).status == 0);
  CHECK(h.command(RDMA_USER_CM_CMD_RESOLVE_IP, r).status == ENOMEM);
}

// Issue 27 item 12: one user bound 28,232 ephemeral ports and every other user's
// rdma_resolve_addr failed with EADDRNOTAVAIL. A user's bound ids hold at most 4096 ports.
TEST_CASE("ucma: one user's ids hold at most max_ports_per_uid ports, another user still gets one",
          "[ucma][limits]") {
  Wire wire;
  Host h(wire, kClientIp, 2);
  h.open_channel(1000);
  const std::uint64_t hog = h.token;
  int bound = 0;
  std::uint32_t last_status = 0;
  for (int i = 0; i < 5000; ++i) {
    const std::uint32_t id = h.create_id(0x3000);
    rdma_ucm_bind_ip bind{};
    bind.addr = ipv4_address(kClientIp, 0);  // an ephemeral port
    bind.id = id;
    last_status = h.command(RDMA_USER_CM_CMD_BIND_IP, bind, 1000, hog).status;
    if (last_status != 0) break;
    ++bound;
  }
  CHECK(bound == 4096);
  CHECK(last_status == EADDRNOTAVAIL);
  h.open_channel(2000);
  rdma_ucm_create_id c{};
  c.uid = 0x4000;
  c.ps = RDMA_PS_TCP;
  const std::uint32_t other = h.response<rdma_ucm_create_id_resp>(h.command(RDMA_USER_CM_CMD_CREATE_ID, c, 2000)).id;
  rdma_ucm_bind_ip bind{};
  bind.addr = ipv4_address(kClientIp, 0);
  bind.id = other;
  CHECK(h.command(RDMA_USER_CM_CMD_BIND_IP, bind, 2000).status == 0);
}

// Issue 27 item 11: closing 64 channels full of ids stalled the daemon for seconds (each
// close looked at every id of every channel, each destroy at every queued event). A close
// now destroys nothing at once: its ids go in batches, one per turn of the loop (advance).
TEST_CASE("ucma: a closed channel's ids are torn down in batches, later, not in the close", "[ucma][limits]") {
  Wire wire;
  Host h(wire, kClientIp, 2);
  h.open_channel(1000);
  for (int i = 0; i < 1000; ++i) h.create_id(0x5000 + static_cast<std::uint64_t>(i));
  ::close(std::exchange(h.app_fd, -1));
  h.watcher.run_ready();
  CHECK(h.service.counters().channels_closed == 1);
  CHECK(h.service.counters().ids_destroyed == 0);
  int turns = 0;
  while (h.service.counters().ids_destroyed < 1000 && turns < 100) {
    REQUIRE(h.service.next_deadline().has_value());
    h.service.advance(h.now);
    ++turns;
    CHECK(h.service.counters().ids_destroyed <= static_cast<std::uint64_t>(256 * turns));
  }
  CHECK(h.service.counters().ids_destroyed == 1000);
  CHECK(turns == 4);
  CHECK(h.service.listing()["ids"].empty());
}

// Issue 27 item 11: ids per process and per user, whatever the channels.
TEST_CASE("ucma: ids are bounded per process and per user across channels", "[ucma][limits]") {
  Wire wire;
  UcmaConfig config = Host::config_for(kClientIp, 2);
  config.max_ids_per_process = 3;
  config.max_ids_per_uid = 5;
  Host h(wire, config);
  const auto channel_of = [&](pid_t pid) {
    control::ReceivedFds fds;
    const ucma::Frame reply = h.service.handle(1000, pid, ucma::Frame{.kind = ucma::Kind::CreateChannel, .body = {}}, fds, h.now);
    REQUIRE(reply.status == 0);
    h.extra_fds.push_back(fds.release(0));
    return reply.channel;
  };
  const auto create = [&](std::uint64_t channel, uid_t uid = 1000) {
    rdma_ucm_create_id c{};
    c.uid = 1;
    c.ps = RDMA_PS_TCP;
    return h.command(RDMA_USER_CM_CMD_CREATE_ID, c, uid, channel).status;
  };
  const std::uint64_t a = channel_of(10), b = channel_of(10), c = channel_of(20);
  CHECK(create(a) == 0);
  CHECK(create(a) == 0);
  CHECK(create(b) == 0);
  CHECK(create(b) == ENOMEM);  // process 10 holds 3
  CHECK(create(c) == 0);
  CHECK(create(c) == 0);
  CHECK(create(c) == ENOMEM);  // uid 1000 holds 5
  CHECK(h.service.counters().ids_refused == 2);
}

namespace {

// Each id's state changes as `rrdma-vnic trace --layer rdma_cm` prints them.
struct IdTrace final : CmIdObserver {
  void on_cm_id_transition(std::uint32_t id, CmIdState from, CmIdState to) override {
    lines.push_back(describe_transition(id, from, to));
  }
  std::vector<std::string> lines;
};

std::string id_line(std::uint32_t id, const std::string& change) { return "rdma_cm id " + std::to_string(id) + ": " + change; }

}  // namespace

TEST_CASE("ucma: every state change of an id is observed, as cma.c makes it", "[ucma]") {
  Pair p;
  IdTrace server_trace, client_trace;
  p.server.service.set_observer(&server_trace);
  p.client.service.set_observer(&client_trace);

  // An address nobody answers: ADDR_QUERY falls back to ADDR_BOUND (addr_handler).
  p.client.open_channel();
  const std::uint32_t lost = p.client.create_id(0x2000);
  p.client.resolver.answer = AddressResolver::Reach::unroutable;
  rdma_ucm_resolve_ip r{};
  r.dst_addr = ipv4_address(stack::Ipv4Address{0x0A000063}, 7174);
  r.id = lost;
  r.timeout_ms = 2000;
  REQUIRE(p.client.command(RDMA_USER_CM_CMD_RESOLVE_IP, r).status == 0);
  CHECK(p.client.next_event().event == ucma::kAddrError);
  CHECK(client_trace.lines == std::vector<std::string>{id_line(lost, "IDLE -> ADDR_BOUND"),
                                                       id_line(lost, "ADDR_BOUND -> ADDR_QUERY"),
                                                       id_line(lost, "ADDR_QUERY -> ADDR_BOUND")});
  client_trace.lines.clear();
  p.client.resolver.answer = AddressResolver::Reach::reachable;

  const std::uint32_t listener = p.listen(7174);
  const std::uint32_t active = p.resolve(7174);
  const std::uint32_t passive = establish(p, active);
  REQUIRE(p.client.command(RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{.id = active}).status == 0);
  p.deliver();
  CHECK(p.server.next_event().event == ucma::kDisconnected);
  REQUIRE(p.server.command(RDMA_USER_CM_CMD_DISCONNECT, rdma_ucm_disconnect{.id = passive}).status == 0);
  p.deliver();
  CHECK(p.client.next_event().event == ucma::kDisconnected);  // the server's DREP
  rdma_ucm_destroy_id d{};
  d.id = active;
  REQUIRE(p.client.command(RDMA_USER_CM_CMD_DESTROY_ID, d).status == 0);
  d.id = listener;
  REQUIRE(p.server.command(RDMA_USER_CM_CMD_DESTROY_ID, d).status == 0);

  CHECK(client_trace.lines == std::vector<std::string>{
                                  id_line(active, "IDLE -> ADDR_BOUND"), id_line(active, "ADDR_BOUND -> ADDR_QUERY"),
                                  id_line(active, "ADDR_QUERY -> ADDR_RESOLVED"),
                                  id_line(active, "ADDR_RESOLVED -> ROUTE_RESOLVED"),
                                  id_line(active, "ROUTE_RESOLVED -> CONNECT"), id_line(active, "CONNECT -> DISCONNECT"),
                                  id_line(active, "DISCONNECT -> DESTROYING")});
  CHECK(server_trace.lines == std::vector<std::string>{
                                  id_line(listener, "IDLE -> ADDR_BOUND"), id_line(listener, "ADDR_BOUND -> LISTEN"),
                                  id_line(passive, "IDLE -> CONNECT"), id_line(passive, "CONNECT -> DISCONNECT"),
                                  id_line(listener, "LISTEN -> DESTROYING")});
  CHECK(p.client.service.counters().id_transitions_refused == 0);
  CHECK(p.server.service.counters().id_transitions_refused == 0);
}

TEST_CASE("ucma: a state change cma.c never makes is refused, counted and not observed", "[ucma]") {
  std::uint64_t refused = 0;
  CmIdMachine machine(refused);
  IdTrace trace;
  machine.set_observer(&trace);
  CmId id;
  id.id = 9;
  CHECK_FALSE(machine.move(id, CmIdState::Listen));  // LISTEN needs a bound address first
  CHECK_FALSE(machine.move(id, CmIdState::AddrResolved));
  CHECK_FALSE(machine.move(id, CmIdState::Idle));  // no change is not a change
  CHECK(id.state() == CmIdState::Idle);
  CHECK(refused == 3);
  CHECK(trace.lines.empty());

  CHECK(machine.move(id, CmIdState::AddrBound));
  CHECK(machine.move(id, CmIdState::Listen));
  CHECK_FALSE(machine.move(id, CmIdState::Connect));  // a listener never connects
  CHECK(machine.move(id, CmIdState::Destroying));
  CHECK_FALSE(machine.move(id, CmIdState::Destroying));  // destroyed once
  CHECK(id.state() == CmIdState::Destroying);
  CHECK(refused == 5);
  CHECK(trace.lines == std::vector<std::string>{"rdma_cm id 9: IDLE -> ADDR_BOUND", "rdma_cm id 9: ADDR_BOUND -> LISTEN",
                                                "rdma_cm id 9: LISTEN -> DESTROYING"});
}

}  // namespace rrdma::verbs
