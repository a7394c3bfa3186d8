// Runs in the daemon. The rdma_cm character device as the daemon serves it to Debian's
// unmodified librdmacm (docs/RDMA_CM.md): the kernel's ucma file (drivers/infiniband/core/
// ucma.c: channels, ids, an event queue per channel, events_reported, MIGRATE_ID) and the
// rdma_cm layer beneath it (cma.c: port spaces and ports, address resolution through the
// vnic's own ARP, the route, the CMA header, INIT_QP_ATTR), over the connection manager of
// rocev2/cm (which it owns; its MADs leave through a CmMadSink the daemon wires to QP 1).
//
// Commands arrive as ucma frames (verbs/contract/ucma_protocol.h) from the preloaded shim;
// each channel is a socketpair the service makes, keeping one end it watches for EOF (the
// application closed the device: every id of the channel is destroyed, as ucma_close does)
// and writes markers on, and sending the other with the reply.
// One vnic, one IPv4 address: a listener on INADDR_ANY listens on it.
// The ids and their state machine are cm_id.h's: every state change goes through it.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include <rdma/rdma_user_cm.h>

#include <nlohmann/json.hpp>

#include "rocev2/cm/cm.h"
#include "rocev2/cm/cma.h"
#include "stack/addresses.h"
#include "stack/time.h"
#include "verbs/contract/ucma_protocol.h"
#include "verbs/device/cm_id.h"
#include "verbs/device/nic.h"

namespace rrdma::verbs {

// Whether a destination can be reached now (the daemon asks the vnic's stack, which starts
// ARP for the next hop if need be).
class AddressResolver {
 public:
  enum class Reach { reachable, resolving, unroutable };
  virtual ~AddressResolver() = default;
  virtual Reach reach(stack::Ipv4Address destination, Instant now) = 0;
};

struct UcmaConfig {
  stack::Ipv4Address address{};
  std::uint64_t node_guid = 0;          // caps::node_guid: a number whose big-endian bytes are the GUID
  int netdev_mtu = 1500;                // the path MTU is what it allows (iboe_get_mtu)
  rocev2::cm::CmConfig cm{};
  // Each channel holds a descriptor of the daemon, each id and each queued event memory, each
  // bound id a port of the vnic's one address: bounds, so that one user cannot exhaust any of
  // them (rsockets opens a channel per socket; cmtime makes thousands of ids). `up` sets them
  // (docs/RDMA_CM.md, "Limits"); a limit reached is counted and answered as the kernel answers
  // exhaustion: EMFILE for a channel, ENOMEM for an id or an event a command would queue,
  // EADDRNOTAVAIL for a port; an event the network causes is dropped (a request as with a
  // full backlog: the peer's CM retries).
  std::size_t max_channels_per_uid = 1024;
  std::size_t max_ids_per_channel = 16384;
  std::size_t max_ids_per_process = 16384;
  std::size_t max_ids_per_uid = 65536;
  std::size_t max_events_per_channel = 1024;
  std::size_t max_events_per_uid = 16384;
  std::size_t max_ports_per_uid = 4096;  // of 28,232 ephemeral ports (32768..60999)
};

// What `status` shows of them.
nlohmann::json limits_json(const UcmaConfig& config);

struct UcmaCounters {
  std::uint64_t commands = 0;
  std::uint64_t command_errors = 0;     // answered with an errno
  std::uint64_t channels_opened = 0;
  std::uint64_t channels_closed = 0;
  std::uint64_t ids_created = 0;
  std::uint64_t ids_destroyed = 0;
  std::uint64_t events_queued = 0;
  std::uint64_t events_delivered = 0;
  std::uint64_t events_purged = 0;      // queued for an id destroyed or migrated before GET_EVENT
  std::uint64_t connect_requests_dropped_backlog = 0;
  std::uint64_t connect_requests_rejected_address = 0;
  std::uint64_t address_resolutions = 0;
  std::uint64_t address_errors = 0;
  std::uint64_t foreign_channel_refused = 0;  // a command naming another user's channel
  std::uint64_t channels_refused = 0;         // a user holding max_channels_per_uid already
  std::uint64_t ids_refused = 0;              // a channel, process or user at its id limit
  std::uint64_t events_dropped = 0;           // a channel or user at its event limit
  std::uint64_t events_refused = 0;           // a command whose event would not fit (ENOMEM)
  std::uint64_t ports_refused = 0;            // a user at max_ports_per_uid
  std::uint64_t ids_torn_down_later = 0;      // a closed channel's ids, destroyed in batches
  std::uint64_t id_transitions_refused = 0;   // a state change cma.c never makes (cm_id.h): 0
};
std::vector<std::pair<std::string, std::uint64_t>> named(const UcmaCounters& counters);

class UcmaService final : private rocev2::cm::CmEventSink {
 public:
  UcmaService(const UcmaConfig& config, rocev2::cm::CmMadSink& mads, AddressResolver& resolver, FdWatcher& watcher);
  ~UcmaService() override;
  UcmaService(const UcmaService&) = delete;
  UcmaService& operator=(const UcmaService&) = delete;

  // A ucma frame from a process with `uid`: the reply. `fds` holds what came with the request
  // (nothing, for a frame that parsed) and, after a CreateChannel that succeeded, the one
  // descriptor to send with the reply (the caller closes it after sending).
  ucma::Frame handle(uid_t uid, const ucma::Frame& request, control::ReceivedFds& fds, Instant now) {
    return handle(uid, 0, request, fds, now);
  }
  // The same from process `pid` (its channels' ids count against max_ids_per_process).
  ucma::Frame handle(uid_t uid, pid_t pid, const ucma::Frame& request, control::ReceivedFds& fds, Instant now);

  rocev2::cm::ConnectionManager& cm() { return cm_; }
  // Sees every state change of every id (`rrdma-vnic trace --layer rdma_cm`).
  void set_observer(CmIdObserver* observer) { ids_machine_.set_observer(observer); }
  std::optional<Instant> next_deadline() const;
  void advance(Instant now);
  // The netdev's address or MTU changed (`up --netdev`): new ids bind and resolve with them.
  void set_address_and_mtu(stack::Ipv4Address address, int netdev_mtu);

  const UcmaCounters& counters() const { return counters_; }
  const UcmaConfig& config() const { return config_; }
  // Ids of closed channels not yet destroyed (teardown goes in batches, between other work).
  std::size_t ids_awaiting_teardown() const { return doomed_.size(); }
  // For `rrdma-vnic status`: listeners and connections.
  nlohmann::json listing() const;

 private:
  using Endpoint = CmId::Endpoint;

  struct QueuedEvent {
    std::uint32_t id = 0;           // the id the event is about (resp.id)
    std::uint32_t counted_id = 0;   // whose events_reported counts it (the listener's for a request)
    rdma_ucm_event_resp resp{};
  };

  struct Channel {
    std::uint64_t token = 0;
    int fd = -1;
    uid_t uid = 0;
    pid_t pid = 0;                  // the process that created it
    std::deque<QueuedEvent> events;
    std::size_t markers = 0;        // written and not yet consumed by a GET_EVENT
    std::set<std::uint32_t> ids;    // so that closing it costs what it holds
  };

  // What one user holds, against the per-user limits.
  struct UserUse {
    std::size_t channels = 0;
    std::size_t ids = 0;
    std::size_t events = 0;
    std::size_t ports = 0;
  };

  using Reply = std::pair<int, std::vector<std::uint8_t>>;  // errno, response bytes

  // --- channels
  ucma::Frame create_channel(uid_t uid, pid_t pid, const ucma::Frame& request, control::ReceivedFds& fds);
  void close_channel(std::uint64_t token);
  void tear_down_some(Instant now);
  bool room_for_event(const Channel& c) const;
  bool queue_event(std::uint32_t counted_id, QueuedEvent event);
  void erase_events(Channel& c, std::size_t count);  // the user's tally, after events left c
  void top_up_markers(Channel& c);

  // --- commands
  Reply dispatch(Channel& channel, const ucma::Frame& request, Instant now);
  Reply create_id(Channel& ch, ByteSpan body);
  Reply destroy_id(Channel& ch, ByteSpan body, Instant now);
  Reply bind_ip(Channel& ch, ByteSpan body);
  Reply bind_any_family(Channel& ch, ByteSpan body);
  Reply resolve_ip(Channel& ch, ByteSpan body, Instant now);
  Reply resolve_route(Channel& ch, ByteSpan body);
  Reply query_route(Channel& ch, ByteSpan body);
  Reply connect(Channel& ch, ByteSpan body, Instant now);
  Reply listen(Channel& ch, ByteSpan body);
  Reply accept(Channel& ch, ByteSpan body, Instant now);
  Reply reject(Channel& ch, ByteSpan body, Instant now);
  Reply disconnect(Channel& ch, ByteSpan body, Instant now);
  Reply init_qp_attr(Channel& ch, ByteSpan body);
  Reply get_event(Channel& ch);
  Reply set_option(Channel& ch, ByteSpan body);
  Reply notify(Channel& ch, ByteSpan body, Instant now);
  Reply migrate_id(Channel& ch, const ucma::Frame& request, uid_t uid);

  // --- ids
  CmId* id_on(Channel& ch, std::uint32_t id);
  bool room_for_id(const Channel& ch);
  CmId& new_id(Channel& channel, rocev2::cm::PortSpace ps, bool ud);
  // Returns the id's events_reported (DESTROY_ID's answer).
  std::uint32_t destroy(CmId& id, Instant now);
  std::uint32_t purge_events(std::uint32_t id);
  int bind(CmId& id, uid_t uid, std::optional<stack::Ipv4Address> address, std::uint16_t port, bool ipv6_family);
  int port_conflict(const CmId& id, bool any_address, std::uint16_t port, bool listening) const;
  std::optional<std::uint16_t> ephemeral_port(const CmId& id);
  void unbind(CmId& id);
  std::uint64_t service_id(const CmId& id, std::uint16_t port) const;
  void check_resolution(CmId& id, Instant now);
  CmId* id_of_connection(rocev2::cm::ConnectionId c);

  // --- events from the CM
  void on_cm_event(const rocev2::cm::CmEvent& event) override;
  void on_connect_request(const rocev2::cm::CmEvent& event);
  rdma_ucm_event_resp event_for(const CmId& id, std::uint32_t type, std::int32_t status) const;
  void fill_conn_param(rdma_ucm_conn_param& out, const rocev2::cm::CmEvent& event, std::size_t skip) const;
  void fill_ah_attr(ib_uverbs_ah_attr& out, const CmId& id) const;

  UcmaConfig config_;
  AddressResolver& resolver_;
  FdWatcher& watcher_;
  rocev2::cm::ConnectionManager cm_;
  rocev2::cm::PathMtu path_mtu_;
  std::map<std::uint64_t, Channel> channels_;
  std::map<std::uint32_t, CmId> ids_;
  std::map<std::pair<std::uint16_t, std::uint16_t>, std::vector<std::uint32_t>> ports_;  // (ps, port) -> ids
  std::map<std::uint32_t, std::uint32_t> id_of_connection_;  // CM connection -> id
  std::set<std::uint32_t> resolving_;                         // ids in ADDR_QUERY
  std::map<uid_t, UserUse> users_;
  std::map<pid_t, std::size_t> ids_of_process_;
  std::deque<std::uint32_t> doomed_;                          // ids of closed channels
  std::uint32_t next_id_ = 1;
  std::mt19937_64 random_;
  UcmaCounters counters_;
  CmIdMachine ids_machine_{counters_.id_transitions_refused};  // every state change of ids_
  Instant now_{};  // the time of the command or timer being handled (for CM calls from events)
};

}  // namespace rrdma::verbs
