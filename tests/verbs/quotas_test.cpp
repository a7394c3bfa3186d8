// Per-process quotas (verbs/device/quotas.h): the registry's accounting (refusal at the quota with
// ENOMEM, release on destroy and on disconnect, one process's connections counted together,
// ring bytes), the defaults derived from a descriptor limit, and the Nic refusing a create
// cleanly (ENOMEM, nothing kept, no descriptor leaked) while another process still creates.
#include "verbs/device/quotas.h"

#include <dirent.h>

#include <catch2/catch.hpp>

#include <cerrno>
#include <optional>

#include "tests/verbs/nic_client.h"
#include "verbs/device/device_caps.h"
#include "verbs/device/nic.h"
#include "verbs/device/resources.h"

namespace rrdma::verbs {
namespace {

using rocev2::Lkey;
using rocev2::Qpn;
using rocev2::QpType;

constexpr pid_t kPidA = 100;
constexpr pid_t kPidB = 200;

Quotas quotas_with(ResourceKind kind, std::uint64_t limit) {
  Quotas quotas;
  quotas.of(kind) = limit;
  return quotas;
}

std::optional<QuotaUse> use_of(const ResourceRegistry& registry, pid_t pid) {
  for (const QuotaUse& use : registry.quota_use()) {
    if (use.pid == pid) return use;
  }
  return std::nullopt;
}

// A context, a PD and a CQ of `client`, for QPs to be created on.
struct Base {
  Handle context = 0;
  Handle pd = 0;
  Handle cq = 0;
};

Base make_base(ResourceRegistry& registry, std::uint64_t client) {
  Base base;
  base.context = registry.open_context(client).handle;
  base.pd = registry.alloc_pd(client, base.context).handle;
  base.cq = registry.create_cq(client, base.context).handle;
  REQUIRE(base.cq != 0);
  return base;
}

Created create_qp(ResourceRegistry& registry, std::uint64_t client, const Base& base, std::uint64_t ring_bytes = 0) {
  return registry.create_qp(client, QpSpec{.pd = base.pd, .send_cq = base.cq, .recv_cq = base.cq,
                                           .type = QpType::Rc, .qpn = Qpn{1}, .ring_bytes = ring_bytes});
}

TEST_CASE("quotas: the QP past the quota is ENOMEM and counted, destroying one makes room", "[verbs][quotas]") {
  ResourceRegistry registry;
  registry.set_quotas(quotas_with(ResourceKind::Qp, 3));
  REQUIRE(registry.add_client({1, kPidA, 0}) == 0);
  const Base base = make_base(registry, 1);
  std::vector<Handle> qps;
  for (int i = 0; i < 3; ++i) qps.push_back(create_qp(registry, 1, base).handle);
  CHECK(std::count(qps.begin(), qps.end(), 0u) == 0);
  const Created refused = create_qp(registry, 1, base);
  CHECK(refused.error == ENOMEM);
  CHECK(refused.handle == 0);
  CHECK(registry.quota_refusals().of(ResourceKind::Qp) == 1);
  CHECK(use_of(registry, kPidA)->of(ResourceKind::Qp) == 3);
  // A refused QP takes no use of its PD or CQ: both can go once the real QPs have.
  REQUIRE(registry.destroy_qp(1, qps[1]) == 0);
  CHECK(use_of(registry, kPidA)->of(ResourceKind::Qp) == 2);
  CHECK(create_qp(registry, 1, base).ok());
  CHECK(registry.quota_refusals().of(ResourceKind::Qp) == 1);
}

TEST_CASE("quotas: a process's connections share one quota, another process has its own", "[verbs][quotas]") {
  ResourceRegistry registry;
  registry.set_quotas(quotas_with(ResourceKind::Pd, 2));
  REQUIRE(registry.add_client({1, kPidA, 0}) == 0);
  REQUIRE(registry.add_client({2, kPidA, 0}) == 0);  // the same process, a second connection
  REQUIRE(registry.add_client({3, kPidB, 0}) == 0);
  const Handle ctx1 = registry.open_context(1).handle;
  const Handle ctx2 = registry.open_context(2).handle;
  const Handle ctx3 = registry.open_context(3).handle;
  CHECK(registry.alloc_pd(1, ctx1).ok());
  CHECK(registry.alloc_pd(2, ctx2).ok());
  CHECK(registry.alloc_pd(1, ctx1).error == ENOMEM);
  CHECK(registry.alloc_pd(2, ctx2).error == ENOMEM);
  CHECK(registry.alloc_pd(3, ctx3).ok());
  CHECK(registry.alloc_pd(3, ctx3).ok());
  CHECK(registry.alloc_pd(3, ctx3).error == ENOMEM);
  CHECK(registry.quota_refusals().of(ResourceKind::Pd) == 3);

  std::optional<QuotaUse> a = use_of(registry, kPidA);
  REQUIRE(a);
  CHECK(a->connections == 2);
  CHECK(a->of(ResourceKind::Pd) == 2);
  CHECK(a->of(ResourceKind::Context) == 2);
  CHECK(a->descriptors() == 8);  // two contexts, four descriptors each (quotas.h)

  // One connection going gives back what it held, and only that.
  registry.drop_client(2);
  a = use_of(registry, kPidA);
  REQUIRE(a);
  CHECK(a->connections == 1);
  CHECK(a->of(ResourceKind::Pd) == 1);
  CHECK(a->of(ResourceKind::Context) == 1);
  CHECK(registry.alloc_pd(1, ctx1).ok());
  // The last connection going forgets the process.
  registry.drop_client(1);
  CHECK_FALSE(use_of(registry, kPidA));
  CHECK(use_of(registry, kPidB)->of(ResourceKind::Pd) == 2);
}

TEST_CASE("quotas: a disconnect releases every kind and every ring byte", "[verbs][quotas]") {
  ResourceRegistry registry;
  Quotas quotas;
  for (ResourceKind kind : kAllResourceKinds) quotas.of(kind) = 1;
  quotas.ring_bytes = 10000;
  registry.set_quotas(quotas);
  for (std::uint64_t round = 1; round <= 2; ++round) {
    INFO("round " << round);  // the second round must fit again after the first's disconnect
    REQUIRE(registry.add_client({round, kPidA, 0}) == 0);
    const Handle ctx = registry.open_context(round, 1000).handle;
    const Handle pd = registry.alloc_pd(round, ctx).handle;
    const Handle cq = registry.create_cq(round, ctx, 2000).handle;
    const Handle srq = registry.create_srq(round, pd, 3000).handle;
    REQUIRE((ctx && pd && cq && srq));
    REQUIRE(registry.create_qp(round, QpSpec{.pd = pd, .send_cq = cq, .recv_cq = cq, .srq = srq, .qpn = Qpn{5},
                                             .ring_bytes = 4000})
                .ok());
    REQUIRE(registry.create_ah(round, pd).ok());
    REQUIRE(registry.add_mr(round, pd, Lkey{static_cast<std::uint32_t>(round)}) == 0);
    const std::optional<QuotaUse> use = use_of(registry, kPidA);
    REQUIRE(use);
    for (ResourceKind kind : kAllResourceKinds) CHECK(use->of(kind) == 1);
    CHECK(use->ring_bytes == 10000);
    CHECK(use->descriptors() == 4 + 2 + 3 + 2);
    // Every kind is at its quota now.
    CHECK(registry.alloc_pd(round, ctx).error == ENOMEM);
    CHECK(registry.add_mr(round, pd, Lkey{100 + static_cast<std::uint32_t>(round)}) == ENOMEM);
    CHECK(registry.create_ah(round, pd).error == ENOMEM);
    registry.drop_client(round);
    CHECK_FALSE(use_of(registry, kPidA));
  }
  CHECK(registry.quota_refusals().of(ResourceKind::Pd) == 2);
  CHECK(registry.quota_refusals().of(ResourceKind::Mr) == 2);
  CHECK(registry.quota_refusals().of(ResourceKind::Ah) == 2);
}

TEST_CASE("quotas: ring bytes are counted per object, refused past the quota, released", "[verbs][quotas]") {
  ResourceRegistry registry;
  Quotas quotas;
  quotas.ring_bytes = 10 * 4096;
  registry.set_quotas(quotas);
  REQUIRE(registry.add_client({1, kPidA, 0}) == 0);
  const Handle ctx = registry.open_context(1, 4096).handle;
  const Handle pd = registry.alloc_pd(1, ctx).handle;
  const Handle cq = registry.create_cq(1, ctx, 2 * 4096).handle;
  REQUIRE(cq != 0);
  const Base base{ctx, pd, cq};
  const Created qp = create_qp(registry, 1, base, 6 * 4096);  // exactly at the quota now
  REQUIRE(qp.ok());
  CHECK(use_of(registry, kPidA)->ring_bytes == 9 * 4096);
  const Created over = create_qp(registry, 1, base, 2 * 4096);
  CHECK(over.error == ENOMEM);
  CHECK(registry.quota_refusals().ring_bytes == 1);
  CHECK(registry.quota_refusals().of(ResourceKind::Qp) == 0);  // the count was not the problem

  // resize_cq: growing past the quota is refused and leaves the CQ's size; shrinking is
  // always allowed and gives bytes back.
  CHECK(registry.resize_cq(1, cq, 4 * 4096) == ENOMEM);
  CHECK(registry.quota_refusals().ring_bytes == 2);
  CHECK(use_of(registry, kPidA)->ring_bytes == 9 * 4096);
  CHECK(registry.resize_cq(1, cq, 3 * 4096) == 0);
  CHECK(use_of(registry, kPidA)->ring_bytes == 10 * 4096);
  CHECK(registry.resize_cq(1, cq, 4096) == 0);
  CHECK(use_of(registry, kPidA)->ring_bytes == 8 * 4096);
  CHECK(registry.resize_cq(2, cq, 4096) == EINVAL);  // not the client's CQ

  REQUIRE(registry.destroy_qp(1, qp.handle) == 0);
  CHECK(use_of(registry, kPidA)->ring_bytes == 2 * 4096);
  CHECK(create_qp(registry, 1, base, 8 * 4096).ok());
}

TEST_CASE("quotas: resizing a CQ is not creating one: allowed at the CQ quota", "[verbs][quotas]") {
  ResourceRegistry registry;
  registry.set_quotas(quotas_with(ResourceKind::Cq, 1));
  REQUIRE(registry.add_client({1, kPidA, 0}) == 0);
  const Handle ctx = registry.open_context(1).handle;
  const Handle cq = registry.create_cq(1, ctx, 4096).handle;
  REQUIRE(cq != 0);
  CHECK(registry.create_cq(1, ctx, 4096).error == ENOMEM);
  CHECK(registry.resize_cq(1, cq, 8192) == 0);
  CHECK(use_of(registry, kPidA)->ring_bytes == 8192);
}

TEST_CASE("quotas: lowering a quota below what is held refuses more and releases cleanly", "[verbs][quotas]") {
  ResourceRegistry registry;
  REQUIRE(registry.add_client({1, kPidA, 0}) == 0);
  const Handle ctx = registry.open_context(1, 8192).handle;
  Quotas quotas;
  quotas.ring_bytes = 4096;
  registry.set_quotas(quotas);
  CHECK(registry.create_cq(1, ctx, 4096).error == ENOMEM);  // no wrap-around in the check
  CHECK(registry.create_cq(1, ctx, 0).ok());
  CHECK(registry.admit(1, ResourceKind::Srq, 1) == ENOMEM);
  registry.drop_client(1);
  CHECK(registry.quota_use().empty());
}

TEST_CASE("quotas: defaults leave three quarters of the descriptors to others and a reserve", "[verbs][quotas]") {
  const DeviceLimits device{.max_qp = caps::kMaxQp, .max_cq = caps::kMaxCq, .max_srq = caps::kMaxSrq,
                            .max_pd = caps::kMaxPd, .max_ah = caps::kMaxAh, .max_mr = caps::kMaxMr};
  for (std::uint64_t limit : {1024ull, 20000ull, 65536ull, 1048576ull}) {
    INFO("RLIMIT_NOFILE " << limit);
    const Quotas q = default_quotas(limit, std::uint64_t{24} << 30, device);
    std::uint64_t descriptors = 0;
    for (ResourceKind kind : kAllResourceKinds) {
      CHECK(q.of(kind) >= 1);
      descriptors += q.of(kind) * descriptors_per(kind);
    }
    // A process at every quota at once holds at most a quarter of what is left after the
    // reserve: four such processes cannot take the reserve.
    const std::uint64_t reserve = reserved_descriptors(limit);
    CHECK(reserve >= 256);
    CHECK(descriptors <= (limit - reserve) / kProcessShareDivisor);
    CHECK(q.of(ResourceKind::Qp) <= caps::kMaxQp / 4);
    CHECK(q.of(ResourceKind::Mr) <= caps::kMaxMr / 4);
    CHECK(q.of(ResourceKind::Pd) == caps::kMaxPd / 4);
    CHECK(q.ring_bytes == (std::uint64_t{24} << 30) / 16);
  }
  // This machine's limit (20000): (20000 - 2500) / 4 = 4375 descriptors, half of them QPs.
  const Quotas q = default_quotas(20000, 0, device);
  CHECK(q.of(ResourceKind::Qp) == 729);
  CHECK(q.of(ResourceKind::Cq) == 546);
  CHECK(q.of(ResourceKind::Srq) == 273);
  CHECK(q.of(ResourceKind::Context) == 136);
  CHECK(q.ring_bytes == std::uint64_t{64} << 20);  // the floor
  // A limit below the reserve still lets a process open one of each kind that holds
  // descriptors; the others do not depend on the limit.
  const Quotas tiny = default_quotas(64, 0, device);
  for (ResourceKind kind : kAllResourceKinds) {
    CHECK(tiny.of(kind) == (descriptors_per(kind) > 0 ? 1 : q.of(kind)));
  }
}

// ------------------------------------------------------------------ through the Nic

std::size_t open_fds() {
  std::size_t count = 0;
  if (DIR* dir = ::opendir("/proc/self/fd")) {
    while (::readdir(dir) != nullptr) ++count;
    ::closedir(dir);
  }
  return count;
}

struct QuotaSide {
  explicit QuotaSide(const Quotas& quotas)
      : nic(NicConfig{stack::Ipv4Address{test::kTestIpA}, stack::MacAddress{{2, 0, 0, 0, 0, 1}}, 1500, true, {}, quotas},
            port, watcher) {}
  struct NullPort final : PacketPort {
    void send(const rocev2::OutgoingPacket&, std::uint16_t, Instant) override {}
  } port;
  test::FakeWatcher watcher;
  Nic nic;
};

TEST_CASE("quotas: the Nic answers ENOMEM at the QP quota, keeps no fd, and serves another process",
          "[verbs][quotas]") {
  using namespace test;
  QuotaSide side(quotas_with(ResourceKind::Qp, 2));
  TestClient hog(side.nic, 1);
  const Device d = open_device(hog);
  auto q1 = create_qp(hog, d);
  auto q2 = create_qp(hog, d);
  TestQp extra;
  extra.doorbell = hog.keep(eventfd_for_test());
  const std::uint64_t cq = q1->cq_handle;
  const std::size_t fds_before = open_fds();
  const Message refused = hog.call(MessageType::CreateQp,
                                   {d.pd, IBV_QPT_RC, cq, cq, 0, 16, 16, 1, 1, 0, extra.sq.bytes(), extra.rq.bytes()},
                                   {extra.sq.region.fd(), extra.rq.region.fd(), extra.doorbell});
  CHECK(refused.words[0] == ENOMEM);
  CHECK(open_fds() == fds_before);  // the three passed (dup'd) fds were closed, none adopted
  CHECK(side.nic.quota_refusals().of(ResourceKind::Qp) == 1);
  CHECK(side.nic.listing().at(0).qps.size() == 2);
  CHECK(side.watcher.watched.size() == 2);  // no doorbell watched for the refused QP

  // Another process (another pid) is not affected by the hog's quota.
  TestClient other(side.nic, 2, ::getppid());  // another live process
  const Device od = open_device(other);
  auto o1 = create_qp(other, od);
  auto o2 = create_qp(other, od);
  CHECK(side.nic.quota_use().size() == 2);

  // Destroying one of the hog's QPs makes room for exactly one more.
  REQUIRE(hog.call(MessageType::DestroyQp, {q2->handle}).words[0] == 0);
  auto q3 = create_qp(hog, d);
  CHECK(q3->handle != 0);
}

TEST_CASE("quotas: the Nic counts mapped ring pages, and a disconnect gives them back", "[verbs][quotas]") {
  using namespace test;
  auto mapped = [](std::uint32_t entries, std::size_t entry_size) {
    return SharedRegion::mapped_size(RingGeometry{entries, static_cast<std::uint32_t>(entry_size)}.region_size());
  };
  // What the test client creates (nic_client.h): a 64-entry event ring per context; per QP
  // a 16-entry CQ of its own and 16-entry SQ and RQ rings. Whole pages each.
  const std::uint64_t event_ring = mapped(64, sizeof(AsyncEventEntry));
  const std::uint64_t per_qp = mapped(16, sizeof(Cqe)) + mapped(16, sizeof(SendWqe)) + mapped(16, sizeof(RecvWqe));
  CHECK(per_qp > 3 * SharedRegion::mapped_size(1) - 1);  // page-rounded, not the ring's exact size
  Quotas quotas;
  quotas.ring_bytes = event_ring + 2 * per_qp;
  QuotaSide side(quotas);
  {
    TestClient hog(side.nic, 1);
    const Device d = open_device(hog);
    auto q1 = create_qp(hog, d);
    CHECK(side.nic.quota_use().at(0).ring_bytes == event_ring + per_qp);
    auto q2 = create_qp(hog, d);
    CHECK(side.nic.quota_use().at(0).ring_bytes == quotas.ring_bytes);
    ClientRing cq_ring = ClientRing::make(16, sizeof(Cqe));
    const int notify = hog.keep(eventfd_for_test());
    CHECK(hog.call(MessageType::CreateCq, {d.context, 16, cq_ring.bytes()}, {cq_ring.region.fd(), notify}).words[0] ==
          ENOMEM);
    CHECK(side.nic.quota_refusals().ring_bytes == 1);
    side.nic.client_disconnected(hog.client, kNow);
  }
  CHECK(side.nic.quota_use().empty());
  TestClient again(side.nic, 3);
  const Device d = open_device(again);
  auto q = create_qp(again, d);
  CHECK(side.nic.quota_use().at(0).ring_bytes == event_ring + per_qp);
}


// Review of issue 16: per-process quotas alone let several processes of one user take every
// descriptor the daemon has; a budget for all of them together keeps the reserve.
TEST_CASE("quotas: the daemon-wide descriptor budget refuses past it whatever the process's quota", "[verbs][quotas]") {
  ResourceRegistry registry;
  registry.set_quotas(quotas_with(ResourceKind::Qp, 4));
  // Each base (a context, a PD, a CQ) holds 4 + 2 descriptors, each QP 3 (quotas.h).
  registry.set_descriptor_budget(6 + 6 + 3 * 5);
  REQUIRE(registry.add_client({1, kPidA, 0}) == 0);
  REQUIRE(registry.add_client({2, kPidB, 0}) == 0);
  const Base a = make_base(registry, 1);
  const Base b = make_base(registry, 2);
  for (int i = 0; i < 4; ++i) CHECK(create_qp(registry, 1, a).ok());
  CHECK(create_qp(registry, 1, a).error == ENOMEM);  // A's own quota
  CHECK(create_qp(registry, 2, b).ok());
  CHECK(create_qp(registry, 2, b).error == ENOMEM);  // the budget, not B's quota (1 of 4)
  CHECK(registry.quota_refusals().of(ResourceKind::Qp) == 2);
  CHECK(registry.admit(2, ResourceKind::Pd, 0) == 0);  // PDs hold no descriptor
}

}  // namespace
}  // namespace rrdma::verbs

namespace rrdma::verbs {

// Issue 27 item 7: the quotas bounded one process only; a user's processes together took the
// whole device. All processes of one uid now stop at the per-user total, another uid does not.
TEST_CASE("quotas: one user's processes together stop at the per-user total, another user still creates",
          "[verbs][quotas]") {
  constexpr pid_t kPidC = 300;
  ResourceRegistry registry;
  registry.set_quotas(quotas_with(ResourceKind::Pd, 2));
  Quotas per_user = quotas_with(ResourceKind::Pd, 3);
  per_user.ring_bytes = 6000;
  registry.set_user_quotas(per_user);
  REQUIRE(registry.add_client({1, kPidA, 1000}) == 0);
  REQUIRE(registry.add_client({2, kPidB, 1000}) == 0);
  REQUIRE(registry.add_client({3, kPidC, 2000}) == 0);
  const Handle ctx1 = registry.open_context(1).handle;
  const Handle ctx2 = registry.open_context(2).handle;
  const Handle ctx3 = registry.open_context(3).handle;
  CHECK(registry.alloc_pd(1, ctx1).ok());
  CHECK(registry.alloc_pd(1, ctx1).ok());
  CHECK(registry.alloc_pd(2, ctx2).ok());
  CHECK(registry.alloc_pd(2, ctx2).error == ENOMEM);  // process B holds 1 of 2, uid 1000 3 of 3
  CHECK(registry.alloc_pd(3, ctx3).ok());
  CHECK(registry.alloc_pd(3, ctx3).ok());
  CHECK(registry.quota_refusals().of(ResourceKind::Pd) == 1);
  // Ring bytes: 4000 in process A and 4000 in process B pass each process's (unlimited)
  // quota, but not the user's 6000 together.
  CHECK(registry.create_cq(1, ctx1, 4000).ok());
  CHECK(registry.create_cq(2, ctx2, 4000).error == ENOMEM);
  CHECK(registry.create_cq(3, ctx3, 4000).ok());
  // A process going gives its share back to its user.
  registry.drop_client(1);
  CHECK(registry.alloc_pd(2, ctx2).ok());
  CHECK(registry.create_cq(2, ctx2, 4000).ok());
}

TEST_CASE("quotas: the per-user default is twice the per-process quota, unlimited stays unlimited", "[verbs][quotas]") {
  Quotas per_process = quotas_with(ResourceKind::Qp, 500);
  per_process.ring_bytes = 1u << 20;
  const Quotas per_user = default_user_quotas(per_process);
  CHECK(per_user.of(ResourceKind::Qp) == 1000);
  CHECK(per_user.ring_bytes == 2u << 20);
  CHECK(per_user.of(ResourceKind::Mr) == Quotas::kUnlimited);
}

}  // namespace rrdma::verbs
