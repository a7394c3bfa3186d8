// The resource registry: ownership isolation between clients, the verbs EBUSY rules, the
// teardown order of a dead client, and handles that are unique and never come back.
#include "verbs/device/resources.h"

#include <catch2/catch.hpp>

#include <cerrno>
#include <set>

using rrdma::rocev2::Lkey;
using rrdma::rocev2::Qpn;
using rrdma::rocev2::QpType;
using namespace rrdma::verbs;

namespace {

// One client with a context, a PD, a CQ and an RC QP on them.
struct Setup {
  Handle context = 0;
  Handle pd = 0;
  Handle cq = 0;
  Handle qp = 0;
};

Handle must(const Created& created) {
  REQUIRE(created.error == 0);
  REQUIRE(created.handle != 0);
  return created.handle;
}

Setup make_setup(ResourceRegistry& registry, std::uint64_t client, std::uint32_t qpn) {
  Setup s;
  s.context = must(registry.open_context(client));
  s.pd = must(registry.alloc_pd(client, s.context));
  s.cq = must(registry.create_cq(client, s.context));
  s.qp = must(registry.create_qp(client, QpSpec{.pd = s.pd, .send_cq = s.cq, .recv_cq = s.cq,
                                                .type = QpType::Rc, .qpn = Qpn{qpn}}));
  return s;
}

}  // namespace

TEST_CASE("resources: a client may not name another client's handles", "[verbs][resources]") {
  ResourceRegistry registry;
  REQUIRE(registry.add_client({1, 100, 1000}) == 0);
  REQUIRE(registry.add_client({2, 200, 2000}) == 0);
  const Setup a = make_setup(registry, 1, 0x11);
  const Setup b = make_setup(registry, 2, 0x12);

  CHECK(registry.alloc_pd(2, a.context).error == EINVAL);
  CHECK(registry.create_cq(2, a.context).error == EINVAL);
  CHECK(registry.create_srq(2, a.pd).error == EINVAL);
  CHECK(registry.create_ah(2, a.pd).error == EINVAL);
  CHECK(registry.check_pd(2, a.pd) == EINVAL);
  CHECK(registry.check_pd(1, a.pd) == 0);
  CHECK(registry.add_mr(2, a.pd, Lkey{0x10001}) == EINVAL);
  REQUIRE(registry.add_mr(1, a.pd, Lkey{0x10001}) == 0);
  CHECK(registry.remove_mr(2, Lkey{0x10001}) == EINVAL);
  CHECK(registry.listing(1)->mrs == 1);
  CHECK(registry.listing(2)->mrs == 0);
  // A QP mixing its own PD with the other client's CQ is refused as a whole.
  CHECK(registry.create_qp(2, QpSpec{.pd = b.pd, .send_cq = a.cq, .recv_cq = b.cq}).error ==
        EINVAL);
  CHECK(registry.set_qp_state(2, a.qp, IBV_QPS_ERR) == EINVAL);
  CHECK_FALSE(registry.qp_state(2, a.qp).has_value());
  CHECK(registry.destroy_qp(2, a.qp) == EINVAL);
  CHECK(registry.destroy_cq(2, a.cq) == EINVAL);
  CHECK(registry.dealloc_pd(2, a.pd) == EINVAL);
  CHECK(registry.close_context(2, a.context) == EINVAL);

  // Client 1's objects are untouched by all of that.
  const auto listing = registry.listing(1);
  REQUIRE(listing.has_value());
  CHECK(listing->qps.size() == 1);
  CHECK(listing->qps[0].state == IBV_QPS_RESET);
  CHECK(registry.destroy_qp(1, a.qp) == 0);
}

TEST_CASE("resources: a handle of the wrong kind is refused", "[verbs][resources]") {
  ResourceRegistry registry;
  REQUIRE(registry.add_client({1, 100, 0}) == 0);
  const Setup s = make_setup(registry, 1, 0x20);
  CHECK(registry.alloc_pd(1, s.pd).error == EINVAL);       // a PD is not a context
  CHECK(registry.create_ah(1, s.cq).error == EINVAL);      // a CQ is not a PD
  CHECK(registry.destroy_cq(1, s.qp) == EINVAL);
  CHECK(registry.dealloc_pd(1, s.context) == EINVAL);
  CHECK(registry.create_qp(1, QpSpec{.pd = s.pd, .send_cq = s.cq, .recv_cq = s.cq,
                                     .srq = s.cq}).error == EINVAL);
  CHECK(registry.dealloc_pd(1, 0) == EINVAL);
  CHECK(registry.open_context(99).error == ENOENT);  // unknown client
  CHECK(registry.add_client({1, 101, 0}) == EEXIST);
}

TEST_CASE("resources: dealloc PD is refused while anything is on it", "[verbs][resources]") {
  ResourceRegistry registry;
  REQUIRE(registry.add_client({1, 100, 0}) == 0);
  const Setup s = make_setup(registry, 1, 0x30);
  const Handle srq = must(registry.create_srq(1, s.pd));
  const Handle ah = must(registry.create_ah(1, s.pd));
  REQUIRE(registry.add_mr(1, s.pd, Lkey{0x20005}) == 0);

  CHECK(registry.dealloc_pd(1, s.pd) == EBUSY);
  CHECK(registry.destroy_qp(1, s.qp) == 0);
  CHECK(registry.dealloc_pd(1, s.pd) == EBUSY);
  CHECK(registry.destroy_srq(1, srq) == 0);
  CHECK(registry.dealloc_pd(1, s.pd) == EBUSY);
  CHECK(registry.destroy_ah(1, ah) == 0);
  CHECK(registry.dealloc_pd(1, s.pd) == EBUSY);  // the MR still holds it
  CHECK(registry.remove_mr(1, Lkey{0x20005}) == 0);
  CHECK(registry.remove_mr(1, Lkey{0x20005}) == EINVAL);
  CHECK(registry.dealloc_pd(1, s.pd) == 0);
  CHECK(registry.dealloc_pd(1, s.pd) == EINVAL);  // gone
}

TEST_CASE("resources: destroy CQ or SRQ is refused while a QP uses it", "[verbs][resources]") {
  ResourceRegistry registry;
  REQUIRE(registry.add_client({1, 100, 0}) == 0);
  const Handle context = must(registry.open_context(1));
  const Handle pd = must(registry.alloc_pd(1, context));
  const Handle send_cq = must(registry.create_cq(1, context));
  const Handle recv_cq = must(registry.create_cq(1, context));
  const Handle srq = must(registry.create_srq(1, pd));
  const Handle qp1 = must(registry.create_qp(
      1, QpSpec{.pd = pd, .send_cq = send_cq, .recv_cq = recv_cq, .srq = srq}));
  const Handle qp2 = must(registry.create_qp(
      1, QpSpec{.pd = pd, .send_cq = send_cq, .recv_cq = send_cq, .type = QpType::Ud}));

  CHECK(registry.destroy_cq(1, recv_cq) == EBUSY);
  CHECK(registry.destroy_cq(1, send_cq) == EBUSY);
  CHECK(registry.destroy_srq(1, srq) == EBUSY);
  CHECK(registry.close_context(1, context) == EBUSY);

  REQUIRE(registry.destroy_qp(1, qp1) == 0);
  CHECK(registry.destroy_srq(1, srq) == 0);
  CHECK(registry.destroy_cq(1, recv_cq) == 0);
  CHECK(registry.destroy_cq(1, send_cq) == EBUSY);  // qp2 names it twice
  REQUIRE(registry.destroy_qp(1, qp2) == 0);
  CHECK(registry.destroy_cq(1, send_cq) == 0);
  CHECK(registry.close_context(1, context) == EBUSY);  // the PD is still on it
  CHECK(registry.dealloc_pd(1, pd) == 0);
  CHECK(registry.close_context(1, context) == 0);
  CHECK(registry.object_count() == 0);
}

TEST_CASE("resources: drop_client undoes users before what they use", "[verbs][resources]") {
  ResourceRegistry registry;
  REQUIRE(registry.add_client({1, 100, 0}) == 0);
  REQUIRE(registry.add_client({2, 200, 0}) == 0);
  const Setup s = make_setup(registry, 1, 0x40);
  const Handle srq = must(registry.create_srq(1, s.pd));
  const Handle qp2 = must(registry.create_qp(
      1, QpSpec{.pd = s.pd, .send_cq = s.cq, .recv_cq = s.cq, .srq = srq, .qpn = Qpn{0x41}}));
  const Handle ah = must(registry.create_ah(1, s.pd));
  REQUIRE(registry.add_mr(1, s.pd, Lkey{0x30001}) == 0);
  REQUIRE(registry.add_mr(1, s.pd, Lkey{0x40002}) == 0);
  const Setup other = make_setup(registry, 2, 0x50);

  const std::vector<TeardownAction> expected = {
      {ResourceKind::Qp, qp2, Qpn{0x41}},
      {ResourceKind::Qp, s.qp, Qpn{0x40}},
      {ResourceKind::Srq, srq, {}},
      {ResourceKind::Cq, s.cq, {}},
      {ResourceKind::Ah, ah, {}},
      {ResourceKind::Mr, 0x30001, {}},
      {ResourceKind::Mr, 0x40002, {}},
      {ResourceKind::Pd, s.pd, {}},
      {ResourceKind::Context, s.context, {}},
  };
  CHECK(registry.drop_client(1) == expected);
  CHECK_FALSE(registry.has_client(1));
  CHECK_FALSE(registry.listing(1).has_value());
  CHECK(registry.drop_client(1).empty());
  CHECK(registry.open_context(1).error == ENOENT);

  // The other client keeps everything, and its dependency counts are intact.
  CHECK(registry.object_count() == 4);
  CHECK(registry.destroy_cq(2, other.cq) == EBUSY);
  CHECK(registry.destroy_qp(2, other.qp) == 0);
  CHECK(registry.destroy_cq(2, other.cq) == 0);
}

TEST_CASE("resources: handles are unique across clients and kinds and never reused",
          "[verbs][resources]") {
  ResourceRegistry registry;
  REQUIRE(registry.add_client({1, 100, 0}) == 0);
  REQUIRE(registry.add_client({2, 100, 0}) == 0);  // same pid, a new connection: a new client
  std::set<Handle> seen;
  for (int round = 0; round < 50; ++round) {
    const std::uint64_t client = 1 + round % 2;
    const Setup s = make_setup(registry, client, static_cast<std::uint32_t>(round));
    for (Handle h : {s.context, s.pd, s.cq, s.qp}) CHECK(seen.insert(h).second);
    // Destroyed and recreated: the new objects get new handles, and the old ones stay dead.
    REQUIRE(registry.destroy_qp(client, s.qp) == 0);
    REQUIRE(registry.dealloc_pd(client, s.pd) == 0);
    const Handle pd = must(registry.alloc_pd(client, s.context));
    CHECK(seen.insert(pd).second);
    CHECK(registry.check_pd(client, s.pd) == EINVAL);
    CHECK(registry.destroy_qp(client, s.qp) == EINVAL);
  }
}

TEST_CASE("resources: the handle space runs out instead of wrapping", "[verbs][resources]") {
  ResourceRegistry registry(0xFFFF'FFFE);
  REQUIRE(registry.add_client({1, 100, 0}) == 0);
  const Handle context = must(registry.open_context(1));
  CHECK(context == 0xFFFF'FFFE);
  CHECK(must(registry.alloc_pd(1, context)) == 0xFFFF'FFFF);
  CHECK(registry.create_cq(1, context).error == ENOMEM);
  CHECK(registry.object_count() == 2);
}

TEST_CASE("resources: the status listing", "[verbs][resources]") {
  ResourceRegistry registry;
  REQUIRE(registry.add_client({7, 700, 70}) == 0);
  REQUIRE(registry.add_client({3, 300, 30}) == 0);
  const Setup s = make_setup(registry, 7, 0x77);
  REQUIRE(registry.add_mr(7, s.pd, Lkey{0x50003}) == 0);
  CHECK(registry.add_mr(7, s.pd, Lkey{0x50003}) == EEXIST);
  REQUIRE(registry.set_qp_state(7, s.qp, IBV_QPS_RTS) == 0);
  CHECK(registry.qp_state(7, s.qp) == IBV_QPS_RTS);

  const auto all = registry.listings();
  REQUIRE(all.size() == 2);
  CHECK(all[0].client.id == 3);
  CHECK(all[0].pds.empty());
  const ClientListing& l = all[1];
  CHECK(l.client.pid == 700);
  CHECK(l.client.uid == 70);
  CHECK(l.contexts == std::vector<Handle>{s.context});
  CHECK(l.pds == std::vector<Handle>{s.pd});
  CHECK(l.cqs == std::vector<Handle>{s.cq});
  CHECK(l.mrs == 1);
  REQUIRE(l.qps.size() == 1);
  CHECK(l.qps[0].handle == s.qp);
  CHECK(l.qps[0].qpn == Qpn{0x77});
  CHECK(l.qps[0].type == QpType::Rc);
  CHECK(l.qps[0].state == IBV_QPS_RTS);
  CHECK(std::string(resource_kind_name(ResourceKind::Srq)) == "srq");
}
