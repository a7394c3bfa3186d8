// The QP state machine: every transition row of ibv_modify_qp(3) for RC, UC and UD, each
// required attribute left out, each optional one added, one not allowed, illegal moves,
// values out of range.
#include <catch2/catch.hpp>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

#include "verbs/device/device_caps.h"
#include "verbs/device/qp_rules.h"

using rrdma::rocev2::QpType;
using namespace rrdma::verbs;

namespace {

// Attributes with every value valid, so that only the mask decides.
ibv_qp_attr good_attr(ibv_qp_state to, ibv_qp_state cur) {
  ibv_qp_attr a{};
  a.qp_state = to;
  a.cur_qp_state = cur;
  a.path_mtu = IBV_MTU_1024;
  a.path_mig_state = IBV_MIG_MIGRATED;
  a.qkey = 0x11111111;
  a.rq_psn = 0xFFFFFF;
  a.sq_psn = 0;
  a.dest_qp_num = 0x123456;
  a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
  a.ah_attr.is_global = 1;
  a.ah_attr.port_num = 1;
  a.ah_attr.grh.dgid = caps::gid_from_ipv4({0x0A320014});
  a.port_num = 1;
  a.max_rd_atomic = 1;
  a.max_dest_rd_atomic = 1;
  a.min_rnr_timer = 12;
  a.timeout = 14;
  a.retry_cnt = 7;
  a.rnr_retry = 7;
  return a;
}

struct Case {
  ibv_qp_state from, to;
  QpType type;
  int required;  // written out from the man page, not read back from the table
};

// ibv_modify_qp(3)'s three tables, row by row.
const Case kManPage[] = {
    {IBV_QPS_RESET, IBV_QPS_INIT, QpType::Ud, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY},
    {IBV_QPS_INIT, IBV_QPS_RTR, QpType::Ud, 0},
    {IBV_QPS_RTR, IBV_QPS_RTS, QpType::Ud, IBV_QP_SQ_PSN},
    {IBV_QPS_RESET, IBV_QPS_INIT, QpType::Uc, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS},
    {IBV_QPS_INIT, IBV_QPS_RTR, QpType::Uc, IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN},
    {IBV_QPS_RTR, IBV_QPS_RTS, QpType::Uc, IBV_QP_SQ_PSN},
    {IBV_QPS_RESET, IBV_QPS_INIT, QpType::Rc, IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS},
    {IBV_QPS_INIT, IBV_QPS_RTR, QpType::Rc,
     IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
         IBV_QP_MIN_RNR_TIMER},
    {IBV_QPS_RTR, IBV_QPS_RTS, QpType::Rc,
     IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_TIMEOUT},
};

// Optional attributes whose values we accept (ALT_PATH is refused on value: no APM).
bool accepted_optional(int bit) { return bit != IBV_QP_ALT_PATH; }

}  // namespace

TEST_CASE("every man-page row: required passes, each one missing fails naming it") {
  for (const Case& c : kManPage) {
    const ibv_qp_attr a = good_attr(c.to, c.from);
    INFO(state_name(c.from) << " -> " << state_name(c.to) << " type " << int(c.type));
    const auto ok = validate_modify(c.type, c.from, a, IBV_QP_STATE | c.required);
    CHECK(ok.ok());
    CHECK(ok.next_state == c.to);
    REQUIRE(transition_masks(c.type, c.from, c.to)->required == c.required);
    for (int bit = 1; bit <= IBV_QP_RATE_LIMIT; bit <<= 1) {
      if (!(c.required & bit)) continue;
      const auto missing = validate_modify(c.type, c.from, a, (IBV_QP_STATE | c.required) & ~bit);
      CHECK(missing.error == EINVAL);
      CHECK(missing.reason.find(std::string("requires ") + mask_bit_name(bit)) != std::string::npos);
    }
  }
}

TEST_CASE("optional attributes pass, others fail naming them") {
  const QpType types[] = {QpType::Rc, QpType::Uc, QpType::Ud};
  const ibv_qp_state states[] = {IBV_QPS_RESET, IBV_QPS_INIT, IBV_QPS_RTR, IBV_QPS_RTS,
                                 IBV_QPS_SQD, IBV_QPS_SQE, IBV_QPS_ERR};
  int rows = 0;
  for (QpType t : types)
    for (ibv_qp_state from : states)
      for (ibv_qp_state to : states) {
        const auto masks = transition_masks(t, from, to);
        if (!masks) continue;
        ++rows;
        const ibv_qp_attr a = good_attr(to, from);
        const int base = IBV_QP_STATE | masks->required;
        INFO(state_name(from) << " -> " << state_name(to) << " type " << int(t));
        for (int bit = 1; bit <= IBV_QP_RATE_LIMIT; bit <<= 1) {
          if (bit == IBV_QP_STATE || (masks->required & bit)) continue;
          const auto v = validate_modify(t, from, a, base | bit);
          INFO(mask_bit_name(bit));
          if ((masks->optional & bit) && accepted_optional(bit)) {
            CHECK(v.ok());
          } else {
            CHECK(v.error == EINVAL);
            CHECK(v.reason.find(mask_bit_name(bit)) != std::string::npos);
          }
        }
      }
  CHECK(rows == 3 * 23);
}

TEST_CASE("illegal transitions fail") {
  const struct { ibv_qp_state from, to; } bad[] = {
      {IBV_QPS_RESET, IBV_QPS_RTS}, {IBV_QPS_INIT, IBV_QPS_RTS}, {IBV_QPS_RESET, IBV_QPS_RTR},
      {IBV_QPS_RTS, IBV_QPS_RTR},   {IBV_QPS_ERR, IBV_QPS_RTS},  {IBV_QPS_ERR, IBV_QPS_INIT},
      {IBV_QPS_INIT, IBV_QPS_SQD},  {IBV_QPS_SQE, IBV_QPS_SQD},  {IBV_QPS_RTR, IBV_QPS_SQD}};
  for (auto [from, to] : bad) {
    const auto v = validate_modify(QpType::Rc, from, good_attr(to, from), IBV_QP_STATE | 0x1FFFFE);
    CHECK(v.error == EINVAL);
    CHECK(v.reason.find("no transition") != std::string::npos);
  }
  ibv_qp_attr a = good_attr(IBV_QPS_RTS, IBV_QPS_RESET);
  a.qp_state = static_cast<ibv_qp_state>(7);
  CHECK(validate_modify(QpType::Rc, IBV_QPS_RTS, a, IBV_QP_STATE).error == EINVAL);
  CHECK(validate_modify(QpType::Rc, IBV_QPS_RTS, a, 1 << 28).error == EINVAL);
}

TEST_CASE("any state to RESET and ERR with the state alone") {
  for (int s = IBV_QPS_RESET; s <= IBV_QPS_ERR; ++s) {
    const auto from = static_cast<ibv_qp_state>(s);
    for (QpType t : {QpType::Rc, QpType::Uc, QpType::Ud}) {
      CHECK(validate_modify(t, from, good_attr(IBV_QPS_RESET, from), IBV_QP_STATE).ok());
      CHECK(validate_modify(t, from, good_attr(IBV_QPS_ERR, from), IBV_QP_STATE).ok());
      CHECK(validate_modify(t, from, good_attr(IBV_QPS_ERR, from), IBV_QP_STATE | IBV_QP_QKEY).error == EINVAL);
    }
  }
}

TEST_CASE("a mask without IBV_QP_STATE modifies in the current state") {
  const ibv_qp_attr a = good_attr(IBV_QPS_RESET, IBV_QPS_RTS);
  auto v = validate_modify(QpType::Rc, IBV_QPS_RTS, a, IBV_QP_MIN_RNR_TIMER | IBV_QP_ACCESS_FLAGS);
  CHECK(v.ok());
  CHECK(v.next_state == IBV_QPS_RTS);  // qp_state's value is ignored without the bit
  CHECK(validate_modify(QpType::Rc, IBV_QPS_RTS, a, IBV_QP_SQ_PSN).error == EINVAL);
  CHECK(validate_modify(QpType::Ud, IBV_QPS_INIT, a, IBV_QP_QKEY).ok());
  CHECK(validate_modify(QpType::Rc, IBV_QPS_INIT, a, IBV_QP_QKEY).error == EINVAL);
  // No RTR -> RTR: nothing may change there, not even an empty mask.
  v = validate_modify(QpType::Rc, IBV_QPS_RTR, a, 0);
  CHECK(v.error == EINVAL);
  CHECK(v.reason.find("without IBV_QP_STATE") != std::string::npos);
  CHECK(validate_modify(QpType::Rc, IBV_QPS_RESET, a, 0).ok());
}

TEST_CASE("IBV_QP_CUR_STATE must match the true state") {
  ibv_qp_attr a = good_attr(IBV_QPS_RTS, IBV_QPS_SQE);
  CHECK(validate_modify(QpType::Ud, IBV_QPS_SQE, a, IBV_QP_STATE | IBV_QP_CUR_STATE).ok());
  a.cur_qp_state = IBV_QPS_RTS;
  const auto v = validate_modify(QpType::Ud, IBV_QPS_SQE, a, IBV_QP_STATE | IBV_QP_CUR_STATE);
  CHECK(v.error == EINVAL);
  CHECK(v.reason.find("IBV_QP_CUR_STATE") != std::string::npos);
  // Not allowed from INIT (only RTR, RTS, SQD, SQE list it).
  CHECK(validate_modify(QpType::Rc, IBV_QPS_INIT, good_attr(IBV_QPS_INIT, IBV_QPS_INIT),
                        IBV_QP_STATE | IBV_QP_CUR_STATE).error == EINVAL);
}

TEST_CASE("values out of range fail, naming the attribute") {
  const int rtr = IBV_QP_STATE | transition_masks(QpType::Rc, IBV_QPS_INIT, IBV_QPS_RTR)->required;
  const int rts = IBV_QP_STATE | transition_masks(QpType::Rc, IBV_QPS_RTR, IBV_QPS_RTS)->required;
  const int init = IBV_QP_STATE | transition_masks(QpType::Rc, IBV_QPS_RESET, IBV_QPS_INIT)->required;
  struct Bad {
    const char* name;
    ibv_qp_state from, to;
    int mask;
    void (*spoil)(ibv_qp_attr&);
  };
  const Bad bad[] = {
      {"IBV_QP_PATH_MTU", IBV_QPS_INIT, IBV_QPS_RTR, rtr, [](ibv_qp_attr& a) { a.path_mtu = static_cast<ibv_mtu>(6); }},
      {"IBV_QP_PATH_MTU", IBV_QPS_INIT, IBV_QPS_RTR, rtr, [](ibv_qp_attr& a) { a.path_mtu = static_cast<ibv_mtu>(0); }},
      {"IBV_QP_PATH_MTU", IBV_QPS_INIT, IBV_QPS_RTR, rtr, [](ibv_qp_attr& a) { a.path_mtu = IBV_MTU_2048; }},
      {"IBV_QP_RQ_PSN", IBV_QPS_INIT, IBV_QPS_RTR, rtr, [](ibv_qp_attr& a) { a.rq_psn = 1u << 24; }},
      {"IBV_QP_DEST_QPN", IBV_QPS_INIT, IBV_QPS_RTR, rtr, [](ibv_qp_attr& a) { a.dest_qp_num = 1u << 24; }},
      {"IBV_QP_MIN_RNR_TIMER", IBV_QPS_INIT, IBV_QPS_RTR, rtr, [](ibv_qp_attr& a) { a.min_rnr_timer = 32; }},
      {"IBV_QP_MAX_DEST_RD_ATOMIC", IBV_QPS_INIT, IBV_QPS_RTR, rtr,
       [](ibv_qp_attr& a) { a.max_dest_rd_atomic = caps::kMaxQpRdAtom + 1; }},
      {"IBV_QP_AV", IBV_QPS_INIT, IBV_QPS_RTR, rtr, [](ibv_qp_attr& a) { a.ah_attr.is_global = 0; }},
      {"IBV_QP_AV", IBV_QPS_INIT, IBV_QPS_RTR, rtr, [](ibv_qp_attr& a) { a.ah_attr.grh.sgid_index = 1; }},
      {"IBV_QP_AV", IBV_QPS_INIT, IBV_QPS_RTR, rtr, [](ibv_qp_attr& a) { a.ah_attr.grh.dgid.raw[0] = 0xFE; }},
      {"IBV_QP_AV", IBV_QPS_INIT, IBV_QPS_RTR, rtr, [](ibv_qp_attr& a) { a.ah_attr.port_num = 2; }},
      {"IBV_QP_TIMEOUT", IBV_QPS_RTR, IBV_QPS_RTS, rts, [](ibv_qp_attr& a) { a.timeout = 32; }},
      {"IBV_QP_RETRY_CNT", IBV_QPS_RTR, IBV_QPS_RTS, rts, [](ibv_qp_attr& a) { a.retry_cnt = 8; }},
      {"IBV_QP_RNR_RETRY", IBV_QPS_RTR, IBV_QPS_RTS, rts, [](ibv_qp_attr& a) { a.rnr_retry = 8; }},
      {"IBV_QP_SQ_PSN", IBV_QPS_RTR, IBV_QPS_RTS, rts, [](ibv_qp_attr& a) { a.sq_psn = 0xFFFFFFFF; }},
      {"IBV_QP_MAX_QP_RD_ATOMIC", IBV_QPS_RTR, IBV_QPS_RTS, rts,
       [](ibv_qp_attr& a) { a.max_rd_atomic = caps::kMaxQpInitRdAtom + 1; }},
      {"IBV_QP_PORT", IBV_QPS_RESET, IBV_QPS_INIT, init, [](ibv_qp_attr& a) { a.port_num = 0; }},
      {"IBV_QP_PKEY_INDEX", IBV_QPS_RESET, IBV_QPS_INIT, init, [](ibv_qp_attr& a) { a.pkey_index = 1; }},
  };
  for (const Bad& b : bad) {
    ibv_qp_attr a = good_attr(b.to, b.from);
    REQUIRE(validate_modify(QpType::Rc, b.from, a, b.mask).ok());
    b.spoil(a);
    const auto v = validate_modify(QpType::Rc, b.from, a, b.mask);
    INFO(b.name << ": " << v.reason);
    CHECK(v.error == EINVAL);
    CHECK(v.reason.rfind(b.name, 0) == 0);
  }
  // Edge values that are allowed.
  ibv_qp_attr a = good_attr(IBV_QPS_RTS, IBV_QPS_RTR);
  a.timeout = 31;
  a.retry_cnt = 0;
  a.sq_psn = 0xFFFFFF;
  a.max_rd_atomic = caps::kMaxQpInitRdAtom;
  CHECK(validate_modify(QpType::Rc, IBV_QPS_RTR, a, rts).ok());
  // A path MTU up to the active MTU of a jumbo-frame port.
  a = good_attr(IBV_QPS_RTR, IBV_QPS_INIT);
  a.path_mtu = IBV_MTU_4096;
  CHECK(validate_modify(QpType::Rc, IBV_QPS_INIT, a, rtr, QpLimits{.active_mtu = IBV_MTU_4096}).ok());
  CHECK(validate_modify(QpType::Rc, IBV_QPS_INIT, a, rtr).error == EINVAL);
}

TEST_CASE("optional masks of the kernel's table, written out") {
  constexpr int rc_rts = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_ALT_PATH |
                         IBV_QP_PATH_MIG_STATE | IBV_QP_MIN_RNR_TIMER;
  CHECK(transition_masks(QpType::Rc, IBV_QPS_RTR, IBV_QPS_RTS)->optional == rc_rts);
  CHECK(transition_masks(QpType::Rc, IBV_QPS_RTS, IBV_QPS_RTS)->optional == rc_rts);
  CHECK(transition_masks(QpType::Uc, IBV_QPS_SQD, IBV_QPS_RTS)->optional == (rc_rts & ~IBV_QP_MIN_RNR_TIMER));
  CHECK(transition_masks(QpType::Ud, IBV_QPS_RTR, IBV_QPS_RTS)->optional == (IBV_QP_CUR_STATE | IBV_QP_QKEY));
  CHECK(transition_masks(QpType::Ud, IBV_QPS_INIT, IBV_QPS_RTR)->optional == (IBV_QP_PKEY_INDEX | IBV_QP_QKEY));
  CHECK(transition_masks(QpType::Rc, IBV_QPS_RTS, IBV_QPS_SQD)->optional == IBV_QP_EN_SQD_ASYNC_NOTIFY);
  CHECK((transition_masks(QpType::Rc, IBV_QPS_SQD, IBV_QPS_SQD)->optional & IBV_QP_PORT) != 0);
  CHECK((transition_masks(QpType::Uc, IBV_QPS_SQD, IBV_QPS_SQD)->optional & IBV_QP_PORT) == 0);
  CHECK(transition_masks(QpType::Uc, IBV_QPS_SQE, IBV_QPS_RTS)->optional == (IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS));
  CHECK_FALSE(transition_masks(QpType::Rc, IBV_QPS_RTR, IBV_QPS_RTR));
  CHECK_FALSE(transition_masks(QpType::Ud, IBV_QPS_SQE, IBV_QPS_SQE));
}

TEST_CASE("alternate paths are refused and path migration state only MIGRATED") {
  ibv_qp_attr a = good_attr(IBV_QPS_RTS, IBV_QPS_RTS);
  auto v = validate_modify(QpType::Rc, IBV_QPS_RTS, a, IBV_QP_ALT_PATH);
  CHECK(v.error == EINVAL);
  CHECK(v.reason.rfind("IBV_QP_ALT_PATH", 0) == 0);
  CHECK(validate_modify(QpType::Rc, IBV_QPS_RTS, a, IBV_QP_PATH_MIG_STATE).ok());
  a.path_mig_state = IBV_MIG_REARM;
  v = validate_modify(QpType::Rc, IBV_QPS_RTS, a, IBV_QP_PATH_MIG_STATE);
  CHECK(v.error == EINVAL);
  CHECK(v.reason.rfind("IBV_QP_PATH_MIG_STATE", 0) == 0);
}

TEST_CASE("enum fields holding values outside their enums are refused") {
  // The attributes come from another process: write raw integers into the enum fields.
  const auto poke = [](auto& field, unsigned value) { std::memcpy(&field, &value, sizeof value); };
  const int rtr = IBV_QP_STATE | transition_masks(QpType::Rc, IBV_QPS_INIT, IBV_QPS_RTR)->required;
  ibv_qp_attr a = good_attr(IBV_QPS_RTR, IBV_QPS_INIT);
  poke(a.qp_state, 100);
  auto v = validate_modify(QpType::Rc, IBV_QPS_INIT, a, rtr);
  CHECK(v.error == EINVAL);
  CHECK(v.reason.rfind("IBV_QP_STATE", 0) == 0);
  a = good_attr(IBV_QPS_RTR, IBV_QPS_INIT);
  poke(a.path_mtu, 0xFFFFFFFF);
  v = validate_modify(QpType::Rc, IBV_QPS_INIT, a, rtr);
  CHECK(v.error == EINVAL);
  CHECK(v.reason.rfind("IBV_QP_PATH_MTU", 0) == 0);
  a = good_attr(IBV_QPS_RTS, IBV_QPS_RTS);
  poke(a.cur_qp_state, 1000);
  CHECK(validate_modify(QpType::Rc, IBV_QPS_RTS, a, IBV_QP_CUR_STATE).error == EINVAL);
  poke(a.path_mig_state, 77);
  CHECK(validate_modify(QpType::Rc, IBV_QPS_RTS, a, IBV_QP_PATH_MIG_STATE).error == EINVAL);
}

// Issue 27: the kernel stores qp_access_flags as given (uverbs' modify_qp, rxe_qp_from_attr)
// and uses the bits a QP grants; programs pass their MRs' flags. Every IBV_ACCESS_* bit of
// verbs.h (and rdma-core 45's FLUSH bits), alone and all together, at each transition that
// takes IBV_QP_ACCESS_FLAGS, for RC and UC.
TEST_CASE("qp_access_flags: every IBV_ACCESS_* bit is accepted, as the kernel accepts it") {
  struct Bit {
    const char* name;
    unsigned value;
  };
  const Bit bits[] = {
      {"IBV_ACCESS_LOCAL_WRITE", IBV_ACCESS_LOCAL_WRITE},
      {"IBV_ACCESS_REMOTE_WRITE", IBV_ACCESS_REMOTE_WRITE},
      {"IBV_ACCESS_REMOTE_READ", IBV_ACCESS_REMOTE_READ},
      {"IBV_ACCESS_REMOTE_ATOMIC", IBV_ACCESS_REMOTE_ATOMIC},
      {"IBV_ACCESS_MW_BIND", IBV_ACCESS_MW_BIND},
      {"IBV_ACCESS_ZERO_BASED", IBV_ACCESS_ZERO_BASED},
      {"IBV_ACCESS_ON_DEMAND", IBV_ACCESS_ON_DEMAND},
      {"IBV_ACCESS_HUGETLB", IBV_ACCESS_HUGETLB},
      {"IBV_ACCESS_FLUSH_GLOBAL", rrdma::rocev2::access::kFlushGlobal},
      {"IBV_ACCESS_FLUSH_PERSISTENT", rrdma::rocev2::access::kFlushPersistent},
      {"IBV_ACCESS_RELAXED_ORDERING", IBV_ACCESS_RELAXED_ORDERING},
      {"the whole optional range", IBV_ACCESS_OPTIONAL_RANGE},
      {"a bit verbs.h does not define", 1u << 31},
  };
  unsigned all = 0;
  for (const Bit& bit : bits) all |= bit.value;
  for (const QpType type : {QpType::Rc, QpType::Uc}) {
    for (const auto& [from, to] : {std::pair{IBV_QPS_RESET, IBV_QPS_INIT}, std::pair{IBV_QPS_INIT, IBV_QPS_INIT},
                                  std::pair{IBV_QPS_INIT, IBV_QPS_RTR}, std::pair{IBV_QPS_RTR, IBV_QPS_RTS},
                                  std::pair{IBV_QPS_RTS, IBV_QPS_RTS}}) {
      const int mask = IBV_QP_STATE | IBV_QP_ACCESS_FLAGS | transition_masks(type, from, to)->required;
      ibv_qp_attr a = good_attr(to, from);
      for (const Bit& bit : bits) {
        INFO(bit.name << ", type " << int(type) << ", " << state_name(from) << " -> " << state_name(to));
        a.qp_access_flags = bit.value;
        const auto v = validate_modify(type, from, a, mask);
        CHECK(v.reason == "");
        CHECK(v.ok());
      }
      a.qp_access_flags = all;
      CHECK(validate_modify(type, from, a, mask).ok());
    }
  }
}
