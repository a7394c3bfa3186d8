// Memory windows in the MR table (IBA 10.6.7, as Linux rxe's rxe_mw.c checks them): type 1 and
// type 2 binds and their refusals, the consumer-owned key byte, remote access through a
// window's R_Key (range, rights, the QP a type 2 window is bound through), local and remote
// invalidation, a region that cannot go while windows are bound to it, and dma_target's
// translation through the window's region.
#include <catch2/catch.hpp>
#include <cerrno>
#include <cstdint>

#include "verbs/device/mr_table.h"

namespace {

using rrdma::rocev2::Lkey;
using rrdma::rocev2::MwBindRequest;
using rrdma::rocev2::Qpn;
using rrdma::rocev2::Rkey;
using namespace rrdma::verbs;

constexpr int kMemory = 100;
constexpr std::uint32_t kPd = 7;
constexpr std::uint32_t kRw = mr_access::kLocalWrite | mr_access::kRemoteWrite | mr_access::kRemoteRead;
constexpr std::uint64_t kRegionAddr = 0x10000;   // in the client's address space
constexpr std::uint64_t kRegionIova = 0x700000;  // what WQEs and windows name it by
constexpr std::uint64_t kRegionLength = 0x4000;

struct Fixture {
  MrTable table{64};
  RegisterResult region;
  Fixture(std::uint32_t access = kRw | mr_access::kMwBind) {
    MrRequest r;
    r.pd = kPd;
    r.addr = kRegionAddr;
    r.length = kRegionLength;
    r.access = access;
    r.iova = kRegionIova;
    region = table.register_mr(Client{1, kMemory}, r);
    REQUIRE(region.ok());
  }
  AllocMwResult window(int type, std::uint32_t pd = kPd) {
    const AllocMwResult w = table.alloc_mw(Client{1, kMemory}, pd, type);
    REQUIRE(w.ok());
    return w;
  }
  MwBindRequest bind(Rkey current, Rkey next, std::uint64_t addr, std::uint64_t length,
                     std::uint32_t access = mr_access::kRemoteWrite | mr_access::kRemoteRead, Qpn qpn = Qpn(17)) {
    MwBindRequest b;
    b.bind = {current, next, region.lkey, addr, length, access};
    b.qp_pd = kPd;
    b.qpn = qpn;
    return b;
  }
};

Rkey inc(Rkey key) { return Rkey((key.value() & ~0xFFu) | ((key.value() + 1) & 0xFFu)); }

}  // namespace

TEST_CASE("a type 1 window opens nothing until bound, then exactly its range with its rights") {
  Fixture f;
  const AllocMwResult w = f.window(1);
  CHECK(w.handle == (w.rkey.value() & ~0xFFu));
  CHECK_FALSE(f.table.find_rkey(w.rkey));  // valid, but of length 0 (rxe_lookup_mw)
  const Rkey next = inc(w.rkey);
  REQUIRE(f.table.bind_mw(f.bind(w.rkey, next, kRegionIova + 0x1000, 0x800, mr_access::kRemoteRead)));
  CHECK_FALSE(f.table.find_rkey(w.rkey));  // the old key is gone
  const auto facts = f.table.find_rkey(next);
  REQUIRE(facts);
  CHECK(facts->pd == kPd);
  CHECK(facts->access == mr_access::kRemoteRead);
  CHECK(facts->base == kRegionIova + 0x1000);
  CHECK(facts->length == 0x800);
  CHECK_FALSE(facts->bound_qp);  // type 1: any QP of the PD
  // Translation through the region: iova + 0x1000 is the region's address + 0x1000.
  const auto target = f.table.dma_target(*facts, kRegionIova + 0x1100, 0x100);
  REQUIRE(target);
  CHECK(target->address == kRegionAddr + 0x1100);
  CHECK(target->memory == kMemory);
  // Outside the window but inside the region: refused (rxe would allow it: VERBS_MEMORY.md).
  CHECK_FALSE(f.table.dma_target(*facts, kRegionIova + 0x0F00, 0x100));
  CHECK_FALSE(f.table.dma_target(*facts, kRegionIova + 0x1700, 0x200));
  // A zero-length bind unbinds a type 1 window; its new key opens nothing.
  const Rkey third = inc(next);
  REQUIRE(f.table.bind_mw(f.bind(next, third, 0, 0)));
  CHECK_FALSE(f.table.find_rkey(next));
  CHECK_FALSE(f.table.find_rkey(third));
  CHECK_FALSE(f.table.dma_target(*facts, kRegionIova + 0x1100, 0x100));
}

TEST_CASE("binds are refused as rxe_check_bind_mw refuses them") {
  SECTION("a region without MW_BIND (C10-73)") {
    Fixture f(kRw);
    const AllocMwResult w = f.window(1);
    CHECK_FALSE(f.table.bind_mw(f.bind(w.rkey, inc(w.rkey), kRegionIova, 0x100)));
  }
  SECTION("remote write through a region without local write (C10-74)") {
    Fixture f(mr_access::kRemoteRead | mr_access::kMwBind);
    const AllocMwResult w = f.window(1);
    CHECK_FALSE(f.table.bind_mw(f.bind(w.rkey, inc(w.rkey), kRegionIova, 0x100, mr_access::kRemoteWrite)));
    CHECK(f.table.bind_mw(f.bind(w.rkey, inc(w.rkey), kRegionIova, 0x100, mr_access::kRemoteRead)));
  }
  Fixture f;
  const AllocMwResult w = f.window(1);
  const Rkey next = inc(w.rkey);
  SECTION("a range outside the region (C10-75)") {
    CHECK_FALSE(f.table.bind_mw(f.bind(w.rkey, next, kRegionIova - 1, 0x100)));
    CHECK_FALSE(f.table.bind_mw(f.bind(w.rkey, next, kRegionIova + kRegionLength - 0x10, 0x11)));
    CHECK_FALSE(f.table.bind_mw(f.bind(w.rkey, next, UINT64_MAX - 4, 0x100)));
  }
  SECTION("a zero-based type 1 window (o10-36.2.2)") {
    CHECK_FALSE(f.table.bind_mw(f.bind(w.rkey, next, 0, 0x100, mr_access::kRemoteRead | mr_access::kZeroBased)));
  }
  SECTION("a stale window key, or a region key that is not the region's L_Key") {
    CHECK_FALSE(f.table.bind_mw(f.bind(inc(w.rkey), next, kRegionIova, 0x100)));
    MwBindRequest b = f.bind(w.rkey, next, kRegionIova, 0x100);
    b.bind.mr_lkey = Lkey(f.region.rkey.value());
    CHECK_FALSE(f.table.bind_mw(b));
  }
  SECTION("a QP of another PD, a window of another PD than the region") {
    MwBindRequest b = f.bind(w.rkey, next, kRegionIova, 0x100);
    b.qp_pd = kPd + 1;
    CHECK_FALSE(f.table.bind_mw(b));
    const AllocMwResult other = f.window(1, kPd + 1);
    MwBindRequest c = f.bind(other.rkey, inc(other.rkey), kRegionIova, 0x100);
    c.qp_pd = kPd + 1;
    CHECK_FALSE(f.table.bind_mw(c));
  }
  SECTION("rights a window cannot carry") {
    CHECK_FALSE(f.table.bind_mw(f.bind(w.rkey, next, kRegionIova, 0x100, mr_access::kMwBind)));
  }
  // Nothing refused changed the window.
  CHECK_FALSE(f.table.find_rkey(next));
  // The region's last bytes are inside it.
  CHECK(f.table.bind_mw(f.bind(w.rkey, next, kRegionIova + kRegionLength - 0x10, 0x10)));
}

TEST_CASE("a type 2 window: bound through one QP, used through that QP only, invalidated locally or remotely") {
  Fixture f;
  const AllocMwResult w = f.window(2);
  CHECK_FALSE(f.table.bind_mw(f.bind(w.rkey, inc(w.rkey), 0, 0)));  // o10-37.2.40: no zero-length bind
  const Rkey key = inc(w.rkey);
  REQUIRE(f.table.bind_mw(f.bind(w.rkey, key, kRegionIova, 0x1000, mr_access::kRemoteWrite, Qpn(33))));
  const auto facts = f.table.find_rkey(key);
  REQUIRE(facts);
  REQUIRE(facts->bound_qp);
  CHECK(*facts->bound_qp == Qpn(33));
  // Bound: it must be invalidated before it binds again (o10-37.2.30).
  CHECK_FALSE(f.table.bind_mw(f.bind(key, inc(key), kRegionIova, 0x100, mr_access::kRemoteWrite, Qpn(33))));
  // The region cannot go while the window stands on it (IBA 10.6.7.2.6), nor change.
  CHECK(f.table.deregister(1, f.region.lkey) == EINVAL);
  CHECK(f.table.reregister(1, f.region.lkey, {rereg_flags::kChangeAccess, 0, 0, 0, kRw | mr_access::kMwBind}) == EINVAL);
  SECTION("local invalidation needs the window's PD and its exact key") {
    CHECK_FALSE(f.table.invalidate_local(key, kPd + 1));
    CHECK_FALSE(f.table.invalidate_local(inc(key), kPd));
    REQUIRE(f.table.invalidate_local(key, kPd));
  }
  SECTION("remote invalidation (SEND with Invalidate)") {
    REQUIRE(f.table.invalidate_rkey(key, kPd));
  }
  SECTION("its QP is destroyed") {
    CHECK(f.table.forget_qp(Qpn(34)) == 0);
    CHECK(f.table.forget_qp(Qpn(33)) == 1);
  }
  CHECK_FALSE(f.table.find_rkey(key));
  CHECK_FALSE(f.table.dma_target(*facts, kRegionIova, 8));
  CHECK_FALSE(f.table.invalidate_local(key, kPd));  // already free
  CHECK(f.table.deregister(1, f.region.lkey) == 0);
}

TEST_CASE("type 1 windows cannot be invalidated, and a zero-based type 2 window counts from 0") {
  Fixture f;
  const AllocMwResult one = f.window(1);
  REQUIRE(f.table.bind_mw(f.bind(one.rkey, inc(one.rkey), kRegionIova, 0x100, mr_access::kRemoteRead)));
  CHECK_FALSE(f.table.invalidate_local(inc(one.rkey), kPd));  // o10-37.2.26
  CHECK_FALSE(f.table.invalidate_rkey(inc(one.rkey), kPd));
  CHECK(f.table.find_rkey(inc(one.rkey)));

  const AllocMwResult two = f.window(2);
  const Rkey key = inc(two.rkey);
  REQUIRE(f.table.bind_mw(f.bind(two.rkey, key, kRegionIova + 0x2000, 0x1000,
                                 mr_access::kRemoteRead | mr_access::kZeroBased)));
  const auto facts = f.table.find_rkey(key);
  REQUIRE(facts);
  CHECK(facts->base == 0);
  const auto target = f.table.dma_target(*facts, 0x10, 0x20);
  REQUIRE(target);
  CHECK(target->address == kRegionAddr + 0x2010);
  CHECK_FALSE(f.table.dma_target(*facts, 0xFF0, 0x20));
}

TEST_CASE("dealloc_mw: only the owner's handle, a bound window goes, and its region may then go") {
  Fixture f;
  const AllocMwResult w = f.window(1);
  REQUIRE(f.table.bind_mw(f.bind(w.rkey, inc(w.rkey), kRegionIova, 0x100)));
  CHECK(f.table.dealloc_mw(2, w.handle) == EINVAL);
  CHECK(f.table.dealloc_mw(1, w.handle | 1) == EINVAL);
  CHECK(f.table.dealloc_mw(1, f.region.lkey.value()) == EINVAL);  // a region is not a window
  CHECK(f.table.deregister(1, Lkey(w.handle)) == EINVAL);          // nor a window a region
  CHECK(f.table.dealloc_mw(1, w.handle) == 0);
  CHECK_FALSE(f.table.find_rkey(inc(w.rkey)));
  CHECK(f.table.deregister(1, f.region.lkey) == 0);
  CHECK(f.table.size() == 0);
  CHECK(f.table.alloc_mw(Client{1, kMemory}, kPd, 3).error == EINVAL);
}

TEST_CASE("a client's windows and regions go together, in any slot order") {
  Fixture f;
  for (int i = 0; i < 8; ++i) {
    const AllocMwResult w = f.window(1 + i % 2);
    REQUIRE(f.table.bind_mw(f.bind(w.rkey, inc(w.rkey), kRegionIova, 0x100)));
  }
  CHECK(f.table.drop_client(1) == 9);
  CHECK(f.table.size() == 0);
  // Every slot is fresh again: a new region in any of them deregisters at once.
  for (int i = 0; i < 20; ++i) {
    MrRequest r;
    r.pd = kPd;
    r.addr = 0x1000;
    r.length = 0x1000;
    const RegisterResult again = f.table.register_mr(Client{3, kMemory}, r);
    REQUIRE(again.ok());
    CHECK(f.table.deregister(3, again.lkey) == 0);
  }
}
