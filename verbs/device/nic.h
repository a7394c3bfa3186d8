// The verbs device of one vnic: what the daemon is to the applications that use it. It owns
// the RoCE v2 engine and everything the engine's ports need (the MR table, process DMA), the
// resource registry, and for every verbs object the shared rings and eventfds its client
// passed (docs/VERBS_DATAPATH.md is the contract, docs/VERBS_DAEMON.md how this works).
//
// It does no I/O of its own beyond the shared memory and eventfds: packets go out through a
// PacketPort, doorbell fds are watched and notification eventfds written through an
// FdWatcher, both implemented by the daemon (vnic/), so that verbs/ never depends on vnic/
// and a test can drive a Nic in one process. Single-threaded: the daemon's loop makes every
// call.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <functional>
#include <map>
#include <chrono>
#include <memory>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include "rocev2/engine/engine.h"
#include "stack/addresses.h"
#include "stack/time.h"
#include "verbs/contract/abi.h"
#include "verbs/contract/control_protocol.h"
#include "verbs/device/mr_table.h"
#include "verbs/device/process_credentials.h"
#include "verbs/device/process_dma.h"
#include "verbs/device/resources.h"
#include "verbs/contract/ring.h"

namespace rrdma::verbs {

// Where the engine's packets go: the daemon's RoCE v2 UDP port (vnic/ports/roce_port.h).
class PacketPort {
 public:
  virtual ~PacketPort() = default;
  // `udp_source_port` is the QP's flow port (rocev2/encap.h); the packet's spans are valid
  // only during the call.
  virtual void send(const rocev2::OutgoingPacket& packet, std::uint16_t udp_source_port,
                    Instant now) = 0;
  // Packets send() takes now without holding them back (the engine paces itself by it).
  virtual std::size_t transmit_room() const { return rocev2::kUnlimitedTransmitRoom; }
};

// The daemon's event loop as far as the Nic needs it.
class FdWatcher {
 public:
  using Handler = std::function<void(Instant now)>;
  virtual ~FdWatcher() = default;
  // Calls `on_ready` whenever `fd` becomes readable, until unwatch(fd).
  virtual void watch(int fd, Handler on_ready) = 0;
  // Must be called before the fd is closed.
  virtual void unwatch(int fd) = 0;
  // Adds 1 to the eventfd `fd` without ever blocking the caller, whatever the client did to
  // the fd (docs/VERBS_DATAPATH.md: the daemon writes through io_uring).
  virtual void signal(int fd) = 0;
  // The fd is about to be closed: forget any write still pending on it.
  virtual void forget(int fd) = 0;
};

struct NicConfig {
  stack::Ipv4Address address;   // the vnic's IPv4 address: GID index 0
  stack::MacAddress mac;        // node GUID (EUI-64 of the MAC)
  int netdev_mtu = 1500;        // the active MTU follows from it (device_caps.h)
  bool link_up = true;
  // Where the daemon's received frames live (the event loop's receive buffers). When set,
  // the payload writes of received packets are combined (ProcessDma::combine_writes_from),
  // ACKs are coalesced per batch (Engine::hold_acks), and the caller calls end_of_frames()
  // after each batch, before that memory is reused.
  std::span<const std::uint8_t> frame_memory;
  // What one process may hold (verbs/device/quotas.h); the daemon sets them from `up`'s options and
  // its descriptor limit. Unlimited by default.
  Quotas quotas;
  // The descriptors every process together may make the daemon hold for verbs objects (its
  // limit less its reserve): per-process quotas alone let a few processes of one user take
  // them all (found by review). Unlimited by default.
  std::uint64_t descriptor_budget = Quotas::kUnlimited;
  // How long the event loop waits for one system call on a client's memory (it runs on the
  // DMA thread, dma_thread.h) before it gives up on that memory and evicts its client: memory
  // backed by a FUSE file that never answers must not stop the vnic for everyone. 0 runs the
  // calls on the loop itself, unbounded (tools and tests only).
  std::chrono::milliseconds dma_wait_bound{1000};
  // What all processes of one uid may hold together. Unlimited by default. (Last: tests
  // initialize the fields before it by position.)
  Quotas user_quotas = {};
};

// What `rrdma-vnic stats` shows under "verbs". Every refusal and every loss is counted.
struct NicCounters {
  std::uint64_t requests = 0;
  std::uint64_t requests_refused = 0;     // replies with a non-zero status
  std::uint64_t clients_connected = 0;
  std::uint64_t clients_disconnected = 0;
  std::uint64_t clients_evicted = 0;      // their address space went (exec, exit) or their credentials changed
  std::uint64_t lost_writes_of_gone_owners = 0;  // queued writes lost because their owner exited: not NAKed
  std::uint64_t sends_of_lost_clients = 0; // packets of such a client's QPs, not sent
  std::uint64_t sends_after_lost_write = 0; // packets of a QP whose queued write was lost, not sent
  std::uint64_t doorbells = 0;
  std::uint64_t send_wqes = 0;            // popped from SQ rings and given to the engine
  std::uint64_t bad_send_wqes = 0;        // refused by check_send_wqe (QP to error)
  std::uint64_t bad_recv_wqes = 0;        // refused by check_recv_wqe (QP to error)
  std::uint64_t broken_rings = 0;         // a peer corrupted a ring's indices
  std::uint64_t completions = 0;          // CQEs pushed
  std::uint64_t completions_dropped = 0;  // CQ overrun or CQ in error
  std::uint64_t cq_overruns = 0;
  std::uint64_t cq_notifications = 0;
  std::uint64_t async_events = 0;
  std::uint64_t async_events_dropped = 0; // event ring full or broken
  std::uint64_t srq_limit_events = 0;
};

class Nic final : private rocev2::EngineHost, private rocev2::EngineObserver {
 public:
  Nic(const NicConfig& config, PacketPort& port, FdWatcher& watcher);
  ~Nic() override;
  Nic(const Nic&) = delete;
  Nic& operator=(const Nic&) = delete;

  // A control connection was accepted (pid and uid from SO_PEERCRED). 0 or EEXIST.
  int client_connected(const ClientInfo& client);
  // The connection closed (or the process died): everything it made goes, in the registry's
  // drop_client order (engine QPs first, then SRQs, CQs, AHs, MRs, PDs, contexts).
  void client_disconnected(std::uint64_t client_id, Instant now);

  // One verbs request of a connected client; the reply to send back (no fds travel back).
  // Takes the fds it adopts out of `fds`; the caller closes what is left.
  control::Message handle(std::uint64_t client_id, const control::Message& request,
                          control::ReceivedFds& fds, Instant now);

  // A RoCE v2 packet the port parsed and verified, addressed to this vnic.
  void receive(const rocev2::TransportPacket& packet, const rocev2::PacketSource& from, Instant now);
  // The end of a batch of received frames, which are about to be reused: their payloads
  // must be in the applications' memory now, the ACKs held for the batch go out (each
  // send flushes the writes first, so no ACK overtakes its data), and the completions
  // the batch made are published (after the writes they announce).
  void end_of_frames();
  // Runs the engine's timers and any deferred work; then next_deadline() says when to call
  // again (now, if work was left for the next turn of the loop).
  void advance(Instant now);
  std::optional<Instant> next_deadline() const;

  // Who ends a client whose address space is gone (it exec'd, or exited with its connection
  // still open in a child): the daemon closes the connection, which calls
  // client_disconnected. Without one the Nic disconnects the client itself.
  void set_client_evictor(std::function<void(std::uint64_t client_id)> evict) { evict_ = std::move(evict); }

  // The TAP's carrier: IBV_EVENT_PORT_ACTIVE / PORT_ERR to every context.
  void set_link(bool up, Instant now);
  // The netdev's IPv4 address (GID index 0) and MTU changed (`up --netdev`: the interface's
  // own): contexts get IBV_EVENT_GID_CHANGE for a new address; query_port reads the new MTU.
  void set_address_and_mtu(stack::Ipv4Address address, int netdev_mtu, Instant now);

  std::vector<ClientListing> listing();
  const Quotas& quotas() const { return registry_.quotas(); }
  const Quotas& user_quotas() const { return registry_.user_quotas(); }
  std::vector<QuotaUse> quota_use() const { return registry_.quota_use(); }
  const QuotaRefusals& quota_refusals() const { return registry_.quota_refusals(); }
  const NicCounters& counters() const { return counters_; }
  const rocev2::EngineCounters& engine_counters() const { return engine_.counters(); }
  const DmaCounters& dma_counters() const { return dma_.counters(); }
  // A second observer of the engine (`rrdma-vnic stats` and `trace`, vnic/telemetry.h):
  // every call is passed on. nullptr for none.
  void set_engine_observer(rocev2::EngineObserver* observer) { extra_observer_ = observer; }
  std::size_t registrations() const { return mrs_.size(); }

  class RingReceiveQueue;

 private:
  struct Context;
  struct Pd;
  struct Cq;
  struct Srq;
  struct Qp;
  struct Ah;

  // rocev2::EngineHost
  void send_packet(const rocev2::OutgoingPacket& out) override;
  std::size_t transmit_room() override { return port_.transmit_room(); }
  void complete(const rocev2::Completion& cqe) override;
  void async_event(const rocev2::AsyncEvent& event) override;
  // rocev2::EngineObserver
  void on_state_change(rocev2::Qpn qpn, rocev2::QpState from, rocev2::QpState to,
                       std::string_view cause) override;
  void on_packet(rocev2::Qpn qpn, const rocev2::Bth& bth, rocev2::PacketDecision decision,
                 std::string_view detail) override {
    if (extra_observer_ != nullptr) extra_observer_->on_packet(qpn, bth, decision, detail);
  }
  void on_completion(const rocev2::Completion& cqe) override {
    if (extra_observer_ != nullptr) extra_observer_->on_completion(cqe);
  }

  // nic.cpp: the control requests
  control::Message dispatch(std::uint64_t client, const control::Message& request,
                            control::ReceivedFds& fds, Instant now);
  control::Message open_device(std::uint64_t client, const control::Message& m, control::ReceivedFds& fds);
  control::Message query_device(std::uint64_t client, const control::Message& m);
  control::Message query_port(std::uint64_t client, const control::Message& m);
  control::Message query_gid(std::uint64_t client, const control::Message& m);
  control::Message alloc_pd(std::uint64_t client, const control::Message& m);
  control::Message dealloc_pd(std::uint64_t client, const control::Message& m);
  control::Message reg_mr(std::uint64_t client, const control::Message& m);
  control::Message dereg_mr(std::uint64_t client, const control::Message& m);
  control::Message rereg_mr(std::uint64_t client, const control::Message& m);
  control::Message alloc_mw(std::uint64_t client, const control::Message& m);
  control::Message dealloc_mw(std::uint64_t client, const control::Message& m);
  static bool exceeds_max_mr_size(std::uint64_t addr, std::uint64_t length, std::uint32_t access);
  control::Message create_cq(std::uint64_t client, const control::Message& m, control::ReceivedFds& fds);
  control::Message destroy_cq(std::uint64_t client, const control::Message& m);
  control::Message resize_cq(std::uint64_t client, const control::Message& m, control::ReceivedFds& fds);
  control::Message create_qp(std::uint64_t client, const control::Message& m, control::ReceivedFds& fds);
  control::Message modify_qp(std::uint64_t client, const control::Message& m, Instant now);
  control::Message query_qp(std::uint64_t client, const control::Message& m);
  control::Message destroy_qp(std::uint64_t client, const control::Message& m);
  control::Message create_srq(std::uint64_t client, const control::Message& m, control::ReceivedFds& fds);
  control::Message modify_srq(std::uint64_t client, const control::Message& m);
  control::Message query_srq(std::uint64_t client, const control::Message& m);
  control::Message destroy_srq(std::uint64_t client, const control::Message& m);
  control::Message create_ah(std::uint64_t client, const control::Message& m);
  control::Message destroy_ah(std::uint64_t client, const control::Message& m);
  bool owns_context(std::uint64_t client, std::uint64_t handle) const;
  void forget_object(const TeardownAction& action);
  void release_qp(Handle handle);

  // nic_queues.cpp: rings, doorbells, completions, events
  void on_doorbell(Handle qp, Instant now);
  void pump(Qp& qp, Instant now);
  void take_send_ring(Qp& qp);
  bool post_one(Qp& qp, rocev2::SendWr wr);
  void refuse_wqe(Qp& qp, const SendWqe& wqe, rocev2::WcStatus status);
  void flush_receive_ring(Qp& qp);
  void pump_later(Qp& qp);
  void fail_later(Qp& qp);
  void fail_qp(Qp& qp, Instant now);
  void push_completion(Cq& cq, const Cqe& cqe, bool solicited);
  void post_event(Handle context, std::uint32_t type, std::uint64_t element);
  void check_srq_limit(Srq& srq);
  void srq_failed(Srq& srq);
  void settle(Instant now);
  bool memory_lost(std::uint64_t client) const;
  void fail_lost_writes();
  int check_writable_region(std::uint64_t client, std::uint64_t addr, std::uint64_t length,
                            std::uint32_t access);
  int check_writable_rereg(std::uint64_t client, rocev2::Lkey lkey, const ReregRequest& request);
  void evict_lost_clients(std::vector<std::uint64_t> owners, Instant now);
  std::vector<std::uint64_t> check_address_spaces(Instant now);
  void run_deferred(Instant now);
  void publish();
  Qp* qp_by_qpn(rocev2::Qpn qpn);
  rocev2::QpState engine_state(const Qp& qp) const;

  NicConfig config_;
  PacketPort& port_;
  FdWatcher& watcher_;
  MrTable mrs_;
  std::unique_ptr<DmaThread> dma_thread_;
  ProcessDma dma_;
  ResourceRegistry registry_;
  rocev2::Engine engine_;
  Instant now_{};

  std::unordered_map<std::uint64_t, ClientInfo> clients_;
  // Each client's /proc/self/mem (control_protocol.h, open_device), owned here: where its
  // DMA goes (MrTable's Client::memory). Closed when the client goes.
  std::unordered_map<std::uint64_t, int> client_memory_;
  // Each client's /proc/PID/maps, opened at open_device with its memory handle (owned here,
  // -1 when it could not be opened): what ProcessDma asks before each write whether the
  // owner may write there (address_layout.h).
  std::unordered_map<std::uint64_t, int> client_layout_;
  // Each client process's credentials as at connect (SO_PEERCRED's pid): a process that
  // changes them loses its resources (check_address_spaces).
  std::unordered_map<std::uint64_t, CredentialWatch> client_credentials_;
  std::function<void(std::uint64_t)> evict_;
  // When check_address_spaces() next asks whether each client's address space still lives:
  // a client that exec'd without any DMA since loses its resources within this period.
  Instant next_address_check_{};
  std::map<Handle, std::unique_ptr<Context>> contexts_;
  std::map<Handle, std::unique_ptr<Pd>> pds_;
  std::map<Handle, std::unique_ptr<Cq>> cqs_;
  std::map<Handle, std::unique_ptr<Srq>> srqs_;
  std::map<Handle, std::unique_ptr<Qp>> qps_;
  std::map<Handle, std::unique_ptr<Ah>> ahs_;
  std::unordered_map<std::uint32_t, Handle> qp_by_qpn_;

  // Deferred work (docs/ARCHITECTURE.md, "Deferred work in the Nic"). The engine's callbacks
  // must not call back into the engine: a QP that must go to ERR or be pumped is marked and
  // listed, and settle() does it after the engine returns. CQEs and events are pushed at once
  // but made visible once per batch: publish() goes through the CQs and contexts listed. An
  // object is listed at most once (its flag says so); the handle of one that went is skipped
  // (handles are never reused).
  std::vector<Handle> qps_to_settle_;
  std::vector<Handle> cqs_to_publish_;
  std::vector<Handle> contexts_to_publish_;
  bool work_left_ = false;  // settle() stopped at its budget
  // Frames arrive in batches with an end (NicConfig::frame_memory): what they complete is
  // published once per batch, by end_of_frames(), so that the batch's payload writes stay
  // combined instead of being flushed before every completion.
  bool batched_frames_ = false;

  NicCounters counters_;
  rocev2::EngineObserver* extra_observer_ = nullptr;
};

}  // namespace rrdma::verbs
