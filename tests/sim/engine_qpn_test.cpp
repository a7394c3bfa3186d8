// QP numbers (issue 27 item 1): a QPN is not given out again soon after its QP is destroyed.
// A peer's CM matches a REQ as stale by (CA GUID, QPN) while it still holds a live
// connection with that QP; Linux (rxe's xa_alloc_cyclic) never reuses a QPN at once, and
// neither does the engine: cyclic from 17, skipping those in use (docs/RDMA_CM.md,
// "Programs back to back").
#include <catch2/catch.hpp>

#include <set>

#include "tests/sim/engine_harness.h"

namespace rrdma::test {
namespace {

TEST_CASE("engine: a destroyed QP's number is not given out again by the next thousands of QPs", "[engine][qpn]") {
  Side side{stack::Ipv4Address{0x0A4D0003}};
  QpInit init;
  init.type = QpType::Rc;
  init.pd = side.pd;
  init.max_send_wr = 4;
  init.max_recv_wr = 4;
  std::set<std::uint32_t> seen;
  const auto first = side.engine.create_qp(init);
  REQUIRE(first);
  CHECK(first->value() == 17);  // rxe's first QPN too
  seen.insert(first->value());
  REQUIRE(side.engine.destroy_qp(*first) == VerbResult::Ok);
  // A program that creates one QP and exits, 5,000 times: every number is new.
  for (int i = 0; i < 5000; ++i) {
    const auto qpn = side.engine.create_qp(init);
    REQUIRE(qpn);
    CHECK(seen.insert(qpn->value()).second);
    REQUIRE(side.engine.destroy_qp(*qpn) == VerbResult::Ok);
  }
}

}  // namespace
}  // namespace rrdma::test
