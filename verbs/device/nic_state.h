// Internal to verbs/nic*.cpp: the per-object state the Nic keeps beside the registry (which
// knows ownership and dependencies only): adopted shared regions, ring ends, eventfds, and
// the receive-queue adapter the engine pops receive WQEs from.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "verbs/device/nic.h"

namespace rrdma::verbs {

// The engine's receive queue over an RQ or SRQ ring (docs/VERBS_DATAPATH.md, "Posting"):
// WQEs stay in shared memory until a message needs one, then are copied out, checked and
// converted. A WQE that fails check_recv_wqe, or a ring whose indices a peer corrupted,
// makes the queue dead (front() is empty from then on) and is reported once through
// `on_failure`, which must not call into the engine (the engine is calling us).
class Nic::RingReceiveQueue final : public rocev2::ReceiveQueue {
 public:
  RingReceiveQueue(RingConsumer& ring, std::function<void()> on_pop, std::function<void()> on_failure)
      : ring_(ring), on_pop_(std::move(on_pop)), on_failure_(std::move(on_failure)) {}

  const rocev2::RecvWr* front() const override;
  void pop() override;
  bool push(rocev2::RecvWr) override { return false; }  // the client posts through the ring
  std::size_t size() const override;

  bool failed() const { return failed_; }
  // modify_qp(RESET): a queue killed by a bad WQE lives again (the WQE is gone); one whose
  // ring a peer corrupted stays dead (a ring error is sticky).
  void reset() {
    head_.reset();
    refused_.reset();
    refusal_ = WqeError::None;
    failed_ = ring_.error() != RingError::None;
  }
  // The WQE that failed its check, if that is why the queue died.
  const std::optional<RecvWqe>& refused() const { return refused_; }
  WqeError refusal() const { return refusal_; }

 private:
  void fail() const;

  RingConsumer& ring_;
  std::function<void()> on_pop_;
  std::function<void()> on_failure_;
  mutable std::optional<rocev2::RecvWr> head_;
  mutable bool failed_ = false;
  mutable std::optional<RecvWqe> refused_;
  mutable WqeError refusal_ = WqeError::None;
};

struct Nic::Context {
  Handle handle = 0;
  std::uint64_t client = 0;
  SharedRegion region;
  std::unique_ptr<RingProducer> events;
  Doorbell event_fd;
  bool unpublished = false;  // events pushed, in Nic::contexts_to_publish_
};

struct Nic::Pd {
  std::uint64_t client = 0;
  Handle context = 0;
};

struct Nic::Cq {
  Handle handle = 0;
  std::uint64_t client = 0;
  Handle context = 0;
  SharedRegion region;
  std::unique_ptr<RingProducer> ring;
  Doorbell notify;
  bool error = false;  // overrun: every later CQE is dropped (IBV_EVENT_CQ_ERR was sent)
  bool unpublished = false;  // CQEs pushed, in Nic::cqs_to_publish_
  bool solicited = false;    // ... among which a solicited or error one
};

struct Nic::Srq {
  Handle handle = 0;
  std::uint64_t client = 0;
  Handle context = 0;
  SharedRegion region;
  std::unique_ptr<RingConsumer> ring;
  Doorbell doorbell;
  std::unique_ptr<RingReceiveQueue> queue;
  std::uint32_t max_wr = 0;   // the ring's capacity
  std::uint32_t max_sge = 0;
  std::uint32_t limit = 0;
  bool armed = false;         // ibv_modify_srq(IBV_SRQ_LIMIT) armed the limit event
  bool error_reported = false;
};

struct Nic::Qp {
  Handle handle = 0;
  std::uint64_t client = 0;
  Handle context = 0;
  Handle send_cq = 0;
  Handle recv_cq = 0;
  Handle srq = 0;
  rocev2::QpType type = rocev2::QpType::Rc;
  rocev2::Qpn qpn{};
  std::uint32_t max_send_sge = 0;
  std::uint32_t max_recv_sge = 0;
  std::uint32_t max_inline = 0;
  SharedRegion sq_region;
  SharedRegion rq_region;
  std::unique_ptr<RingConsumer> sq;
  std::unique_ptr<RingConsumer> rq;
  Doorbell doorbell;
  std::unique_ptr<RingReceiveQueue> rq_queue;
  // A WQE the engine had no room for (its SQ full): popping stops until a completion.
  std::optional<rocev2::SendWr> held;
  // A WQE check_send_wqe refused: completed with its error once the QP is in error.
  std::optional<SendWqe> refused;
  rocev2::WcStatus refused_status = rocev2::WcStatus::LocQpOpErr;
  bool sq_broken = false;
  bool rq_failure_reported = false;
  // Deferred work (Nic::settle): listed in Nic::qps_to_settle_, to go to ERR first.
  bool queued = false;
  bool must_fail = false;
  // The address vector as the client gave it, for query_qp and the UDP source port.
  ibv_gid dgid{};
  std::uint32_t flow_label = 0;
  std::uint8_t hop_limit = 0;
  std::uint8_t traffic_class = 0;
  std::uint16_t udp_source_port = 0;
  std::uint16_t pkey_index = 0;
};

struct Nic::Ah {
  std::uint64_t client = 0;
  stack::Ipv4Address dest{};
  std::uint32_t flow_label = 0;
  std::uint8_t traffic_class = 0;  // the IPv4 TOS of what a UD QP sends through this AH
};

}  // namespace rrdma::verbs
