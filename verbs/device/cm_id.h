// Runs in the daemon. An rdma_cm id as the rdma_cm device keeps it (what cma.c's
// rdma_id_private is to the kernel), and its state machine: the states of cma.c's
// enum rdma_cm_state that ours has, and the one function that changes an id's state
// (CmIdMachine::move). It refuses a change cma.c never makes, and reports each change it makes
// to an observer (`rrdma-vnic trace NAME --layer rdma_cm`), as the connection manager reports
// its connections' (rocev2/cm/cm.h, CmObserver). The ucma ABI around the ids (commands,
// replies, channels, events, limits) is ucma_service.{h,cpp}; docs/RDMA_CM.md.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "rocev2/cm/cm.h"
#include "rocev2/cm/cma.h"
#include "stack/addresses.h"
#include "stack/time.h"

namespace rrdma::verbs {

// cma.c's names. No ADDR_QUERY -> ROUTE_QUERY step: a RoCE route is resolved at once
// (cma_resolve_iboe_route). DESTROYING is the id's last state, entered as it is destroyed.
enum class CmIdState : std::uint8_t {
  Idle, AddrQuery, AddrResolved, RouteResolved, Connect, Disconnect, AddrBound, Listen, Destroying
};
std::string_view to_string(CmIdState state);

// The changes cma.c makes (its cma_comp_exch pairs), each for one command or event:
//   IDLE -> ADDR_BOUND              bind (BIND_IP, BIND; RESOLVE_IP or LISTEN on an unbound id)
//   IDLE -> CONNECT                 a listener's new id for a CONNECT_REQUEST (cma_ib_req_handler)
//   ADDR_BOUND -> ADDR_QUERY        RESOLVE_IP
//   ADDR_QUERY -> ADDR_RESOLVED     the next hop answered ARP
//   ADDR_QUERY -> ADDR_BOUND        ADDR_ERROR (timeout, no route)
//   ADDR_RESOLVED -> ROUTE_RESOLVED RESOLVE_ROUTE
//   ROUTE_RESOLVED -> CONNECT       CONNECT (REQ or SIDR_REQ sent)
//   CONNECT -> DISCONNECT           the CM's DISCONNECTED (DREQ or DREP)
//   ADDR_BOUND -> LISTEN            LISTEN
//   LISTEN -> ADDR_BOUND            the CM refused the listen
//   any other -> DESTROYING         DESTROY_ID, the channel closed, an orphaned request
bool legal_transition(CmIdState from, CmIdState to);

// Whether an id in `state` has a peer address (RESOLVE_IP gave it one), and a route.
bool has_peer(CmIdState state);
bool has_route(CmIdState state);

// Sees each state change of an id: a trace line for `rrdma-vnic trace`.
class CmIdObserver {
 public:
  virtual ~CmIdObserver() = default;
  virtual void on_cm_id_transition(std::uint32_t id, CmIdState from, CmIdState to) = 0;
};
// "rdma_cm id 7: ADDR_QUERY -> ADDR_RESOLVED"
std::string describe_transition(std::uint32_t id, CmIdState from, CmIdState to);

// One rdma_cm_id. Its state is read here and changed only by CmIdMachine::move.
class CmId {
 public:
  struct Endpoint {
    stack::Ipv4Address ip{};
    std::uint16_t port = 0;
  };

  CmIdState state() const { return state_; }

  std::uint32_t id = 0;
  std::uint64_t channel = 0;
  std::uint64_t uid = 0;                // librdmacm's cma_id_private*, echoed in events
  rocev2::cm::PortSpace ps = rocev2::cm::PortSpace::Tcp;
  bool ud = false;
  bool bound = false;
  bool on_device = false;               // bound to the vnic's address (not INADDR_ANY)
  bool ipv6_family = false;             // bound with a sockaddr_in6 (reported back so)
  Endpoint src{};
  Endpoint dst{};
  std::uint32_t seq_num = 0;            // our starting PSN (the PSN we expect to receive)
  std::optional<rocev2::cm::ConnectionId> connection;
  bool active = false;
  std::uint32_t qp_num = 0;
  std::uint32_t qkey = 0;
  std::uint32_t events_reported = 0;
  std::uint32_t backlog = 0;            // listener: CONNECT_REQUESTs that may wait unfetched
  std::optional<std::uint32_t> listener;  // a child: the listener whose request made it
  std::uint8_t tos = 0;
  bool reuseaddr = false;
  std::optional<std::uint8_t> ack_timeout;
  uid_t owner_uid = 0;                  // whose limits the id counts against
  pid_t owner_pid = 0;
  std::optional<Instant> resolve_deadline;  // AddrQuery: ADDR_ERROR after this
  std::uint32_t flow_label = 0;

 private:
  friend class CmIdMachine;
  CmIdState state_ = CmIdState::Idle;
};

// Performs the state changes of ids. `refused` counts the changes asked for that cma.c never
// makes (a bug of the service if ever not 0: stats `rdma_cm.id_transitions_refused`).
class CmIdMachine {
 public:
  explicit CmIdMachine(std::uint64_t& refused) : refused_(refused) {}
  void set_observer(CmIdObserver* observer) { observer_ = observer; }
  // Moves `id` to `to` and reports it when the change is legal; otherwise counts it and
  // leaves the id as it was. True when it moved.
  bool move(CmId& id, CmIdState to);

 private:
  std::uint64_t& refused_;
  CmIdObserver* observer_ = nullptr;
};

}  // namespace rrdma::verbs
