// The daemon's resource registry: which application connection (client) owns which verbs
// object (context, PD, CQ, QP, SRQ, AH), what each object depends on, and therefore what may
// be destroyed now and in which order a dead client's objects must go. Pure bookkeeping: no
// system call, no engine; the daemon asks before acting and carries out the answer.
// Memory regions live in verbs/device/mr_table.h; the registry only counts them per PD (by L_Key) so
// that ibv_dealloc_pd can refuse a PD that still has regions. It also counts what each
// process holds against its quotas (verbs/device/quotas.h) and refuses, with ENOMEM, a creation
// that would exceed one. docs/VERBS_RESOURCES.md.
#pragma once

#include <infiniband/verbs.h>
#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "rocev2/engine/work.h"
#include "rocev2/types.h"
#include "verbs/device/quotas.h"

namespace rrdma::verbs {

// One number space for every object of every client, drawn from a counter that never goes
// back: a handle names at most one object for the daemon's whole life, so a stale handle
// can never reach a newer object, and the PD number the MR table stores cannot be forged
// into another client's PD. 0 is never a handle.
using Handle = std::uint32_t;

// An application connection. `id` is the daemon's number for the connection (never reused),
// pid and uid come from SO_PEERCRED.
struct ClientInfo {
  std::uint64_t id = 0;
  pid_t pid = 0;
  uid_t uid = 0;
  int pidfd = -1;  // the connecting process (SO_PEERPIDFD), borrowed at connect; -1: none
};

// A new handle, or the errno that refused it.
struct Created {
  int error = 0;  // 0, EINVAL (a named handle is not the client's or of the wrong kind),
                  // ENOENT (unknown client), ENOMEM (the process's quota is reached, or
                  // the handle space exhausted)
  Handle handle = 0;
  bool ok() const { return error == 0; }
};

// What ibv_create_qp names; every handle must be the client's own and of the right kind.
struct QpSpec {
  Handle pd = 0;
  Handle send_cq = 0;
  Handle recv_cq = 0;
  std::optional<Handle> srq = std::nullopt;
  rocev2::QpType type = rocev2::QpType::Rc;
  rocev2::Qpn qpn{};  // chosen by the daemon's QP number allocator, recorded for `status`
  std::uint64_t ring_bytes = 0;  // the SQ and RQ rings the daemon maps
};

// One step of a dead client's teardown. `handle` is the registry handle, or for an MR the
// L_Key (the daemon calls MrTable::deregister with it).
struct TeardownAction {
  ResourceKind kind = ResourceKind::Context;
  Handle handle = 0;
  rocev2::Qpn qpn{};  // for QPs: which engine QP to stop
  bool operator==(const TeardownAction&) const = default;
};

struct QpListing {
  Handle handle = 0;
  rocev2::Qpn qpn{};
  rocev2::QpType type = rocev2::QpType::Rc;
  ibv_qp_state state = IBV_QPS_RESET;
};

// What `rrdma-vnic status` shows for one client. Handles in creation order.
struct ClientListing {
  ClientInfo client;
  std::vector<Handle> contexts;
  std::vector<Handle> pds;
  std::size_t mrs = 0;
  std::vector<Handle> cqs;
  std::vector<QpListing> qps;
  std::vector<Handle> srqs;
  std::vector<Handle> ahs;
};

class ResourceRegistry {
 public:
  // The first handle the counter hands out; a test may start near the top of the space.
  // Quotas start unlimited.
  explicit ResourceRegistry(Handle first_handle = 1);

  // Applies to creations from now on; what is held already stays.
  void set_quotas(const Quotas& quotas) { quotas_ = quotas; }
  // What all processes of one uid may hold together (the same refusal, ENOMEM, counted alike).
  void set_user_quotas(const Quotas& quotas) { user_quotas_ = quotas; }
  const Quotas& user_quotas() const { return user_quotas_; }
  // The descriptors all processes' objects together may hold (descriptors_per): past it a
  // creation is ENOMEM whatever the process's own quota says, counted as a refusal of its kind.
  void set_descriptor_budget(std::uint64_t descriptors) { descriptor_budget_ = descriptors; }
  const Quotas& quotas() const { return quotas_; }
  // 0, or ENOMEM when one more object of `kind` with `ring_bytes` of rings would take the
  // client's process over a quota (the refusal is counted). Every create below checks this
  // itself; the daemon asks first only to refuse before it maps a ring or registers memory.
  int admit(std::uint64_t client_id, ResourceKind kind, std::uint64_t ring_bytes);
  // Per process, ordered by pid.
  std::vector<QuotaUse> quota_use() const;
  const QuotaRefusals& quota_refusals() const { return refusals_; }

  // 0, or EEXIST when the id is already a client.
  int add_client(const ClientInfo& client);
  bool has_client(std::uint64_t client_id) const;

  // `ring_bytes`: the shared regions the daemon maps for the object (counted against the
  // process's ring quota until the object goes).
  Created open_context(std::uint64_t client_id, std::uint64_t ring_bytes = 0);
  // EBUSY while PDs or CQs remain on the context.
  int close_context(std::uint64_t client_id, Handle context);

  Created alloc_pd(std::uint64_t client_id, Handle context);
  // EBUSY while MRs, QPs, SRQs or AHs remain on the PD (ibv_dealloc_pd(3)).
  int dealloc_pd(std::uint64_t client_id, Handle pd);

  Created create_cq(std::uint64_t client_id, Handle context, std::uint64_t ring_bytes = 0);
  // ibv_resize_cq: the CQ's ring becomes `ring_bytes`. 0, EINVAL (not the client's CQ) or
  // ENOMEM (over the ring quota; the CQ keeps its old ring).
  int resize_cq(std::uint64_t client_id, Handle cq, std::uint64_t ring_bytes);
  // EBUSY while a QP sends or receives into it (ibv_destroy_cq(3)).
  int destroy_cq(std::uint64_t client_id, Handle cq);

  Created create_srq(std::uint64_t client_id, Handle pd, std::uint64_t ring_bytes = 0);
  // EBUSY while a QP receives from it.
  int destroy_srq(std::uint64_t client_id, Handle srq);

  Created create_qp(std::uint64_t client_id, const QpSpec& spec);
  int destroy_qp(std::uint64_t client_id, Handle qp);
  // After validate_modify() (qp_rules.h) accepted the modify and the engine applied it.
  int set_qp_state(std::uint64_t client_id, Handle qp, ibv_qp_state state);
  std::optional<ibv_qp_state> qp_state(std::uint64_t client_id, Handle qp) const;

  Created create_ah(std::uint64_t client_id, Handle pd);
  int destroy_ah(std::uint64_t client_id, Handle ah);

  // The MR table's side: check_pd() before MrTable::register_mr (0 or EINVAL: the PD must be
  // the client's own), then add_mr() with the L_Key it returned (ENOMEM over the MR quota:
  // the caller deregisters again); remove_mr() after
  // MrTable::deregister succeeded.
  int check_pd(std::uint64_t client_id, Handle pd) const;
  int add_mr(std::uint64_t client_id, Handle pd, rocev2::Lkey lkey);
  int remove_mr(std::uint64_t client_id, rocev2::Lkey lkey);

  // Forgets the client and everything it owns, and returns the order the daemon must undo it
  // in: QPs (they reference all the rest), SRQs, CQs, AHs, MRs, PDs, contexts; newest first
  // within a kind. Empty for an unknown client.
  std::vector<TeardownAction> drop_client(std::uint64_t client_id);

  std::optional<ClientListing> listing(std::uint64_t client_id) const;
  std::vector<ClientListing> listings() const;  // ordered by client id
  std::size_t object_count() const { return objects_.size(); }

 private:
  struct Object {
    ResourceKind kind = ResourceKind::Context;
    std::uint64_t owner = 0;
    Handle parent = 0;  // context of a PD or CQ; PD of a QP, SRQ or AH; 0 for a context
    Handle send_cq = 0;
    Handle recv_cq = 0;
    Handle srq = 0;
    std::uint32_t users = 0;  // objects (and MRs) that name this one
    rocev2::Qpn qpn{};
    rocev2::QpType qp_type = rocev2::QpType::Rc;
    ibv_qp_state qp_state = IBV_QPS_RESET;
    std::uint64_t ring_bytes = 0;
  };
  struct MrRecord {
    std::uint64_t owner = 0;
    Handle pd = 0;
  };

  // The object when it exists, belongs to the client and is of that kind; else nullptr.
  Object* owned(std::uint64_t client_id, Handle handle, ResourceKind kind);
  const Object* owned(std::uint64_t client_id, Handle handle, ResourceKind kind) const;
  enum class Exhausted : std::uint8_t { Nothing, Objects, RingBytes };
  Exhausted exhausted(std::uint64_t client_id, ResourceKind kind, std::uint64_t ring_bytes) const;
  static bool over_ring_quota(const QuotaUse& use, const Quotas& quotas, std::uint64_t more_bytes);
  bool over_ring_quotas(std::uint64_t client_id, std::uint64_t more_bytes) const;
  Created insert(std::uint64_t client_id, Object object);
  void erase(Handle handle);
  void count(std::uint64_t client_id, ResourceKind kind, std::uint64_t ring_bytes, bool add);
  void use(Handle handle);
  void release(Handle handle);
  int destroy(std::uint64_t client_id, Handle handle, ResourceKind kind);
  std::vector<Handle> handles_of(std::uint64_t client_id, ResourceKind kind) const;

  std::uint64_t next_handle_;  // 64-bit so that exhaustion is visible rather than a wrap
  std::unordered_map<std::uint64_t, ClientInfo> clients_;
  std::unordered_map<Handle, Object> objects_;
  std::unordered_map<std::uint32_t, MrRecord> mrs_;  // by L_Key
  Quotas quotas_;
  std::uint64_t descriptor_budget_ = Quotas::kUnlimited;
  Quotas user_quotas_;
  std::unordered_map<pid_t, QuotaUse> use_;       // per process with at least one client
  std::unordered_map<uid_t, QuotaUse> user_use_;  // per uid with at least one client (pid 0)
  QuotaRefusals refusals_;
};

}  // namespace rrdma::verbs
