#include "verbs/device/qp_rules.h"

#include <cerrno>
#include <cstring>
#include <type_traits>
#include <string>

namespace rrdma::verbs {
namespace {

using rocev2::QpType;

// One row per legal transition. Required columns: ibv_modify_qp(3). Optional columns: the
// kernel's qp_state_table (drivers/infiniband/core/verbs.c), which rxe enforces through
// ib_modify_qp_is_ok(). IBV_QP_STATE itself is implied by every transition.
struct Row {
  ibv_qp_state from;
  ibv_qp_state to;
  int rc_required, uc_required, ud_required;
  int rc_optional, uc_optional, ud_optional;
};

constexpr int kPkey = IBV_QP_PKEY_INDEX, kPort = IBV_QP_PORT, kQkey = IBV_QP_QKEY,
              kAccess = IBV_QP_ACCESS_FLAGS, kAv = IBV_QP_AV, kMtu = IBV_QP_PATH_MTU,
              kDestQpn = IBV_QP_DEST_QPN, kRqPsn = IBV_QP_RQ_PSN, kSqPsn = IBV_QP_SQ_PSN,
              kDestRd = IBV_QP_MAX_DEST_RD_ATOMIC, kRd = IBV_QP_MAX_QP_RD_ATOMIC,
              kRnrTimer = IBV_QP_MIN_RNR_TIMER, kTimeout = IBV_QP_TIMEOUT,
              kRetry = IBV_QP_RETRY_CNT, kRnrRetry = IBV_QP_RNR_RETRY, kAlt = IBV_QP_ALT_PATH,
              kMig = IBV_QP_PATH_MIG_STATE, kCur = IBV_QP_CUR_STATE,
              kSqdNotify = IBV_QP_EN_SQD_ASYNC_NOTIFY;

// Attributes that may change in RTS, and on the way back to RTS from SQD.
constexpr int kRcRtsOptional = kCur | kAccess | kAlt | kMig | kRnrTimer;
constexpr int kUcRtsOptional = kCur | kAccess | kAlt | kMig;
constexpr int kUdRtsOptional = kCur | kQkey;

// clang-format off
constexpr Row kRows[] = {
  //  from          to             RC required / UC required / UD required
  //                               RC optional / UC optional / UD optional
  {IBV_QPS_RESET, IBV_QPS_INIT,  kPkey | kPort | kAccess, kPkey | kPort | kAccess, kPkey | kPort | kQkey,
                                 0, 0, 0},
  {IBV_QPS_INIT,  IBV_QPS_INIT,  0, 0, 0,
                                 kPkey | kPort | kAccess, kPkey | kPort | kAccess, kPkey | kPort | kQkey},
  {IBV_QPS_INIT,  IBV_QPS_RTR,   kAv | kMtu | kDestQpn | kRqPsn | kDestRd | kRnrTimer,
                                 kAv | kMtu | kDestQpn | kRqPsn, 0,
                                 kAlt | kAccess | kPkey, kAlt | kAccess | kPkey, kPkey | kQkey},
  {IBV_QPS_RTR,   IBV_QPS_RTS,   kSqPsn | kRd | kRetry | kRnrRetry | kTimeout, kSqPsn, kSqPsn,
                                 kRcRtsOptional, kUcRtsOptional, kUdRtsOptional},
  {IBV_QPS_RTS,   IBV_QPS_RTS,   0, 0, 0, kRcRtsOptional, kUcRtsOptional, kUdRtsOptional},
  {IBV_QPS_RTS,   IBV_QPS_SQD,   0, 0, 0, kSqdNotify, kSqdNotify, kSqdNotify},
  {IBV_QPS_SQD,   IBV_QPS_RTS,   0, 0, 0, kRcRtsOptional, kUcRtsOptional, kUdRtsOptional},
  // Only with the send queue drained may the path change (IBA ch. 10, SQD), the port too.
  {IBV_QPS_SQD,   IBV_QPS_SQD,   0, 0, 0,
                                 kPort | kAv | kTimeout | kRetry | kRnrRetry | kRd | kDestRd | kAlt |
                                     kAccess | kPkey | kRnrTimer | kMig,
                                 kAv | kAlt | kAccess | kPkey | kMig, kPkey | kQkey},
  // SQE is a UC/UD state (an RC send error takes the whole QP to ERR); leaving it for RTS
  // is the consumer's acknowledgement of the flushed send queue.
  {IBV_QPS_SQE,   IBV_QPS_RTS,   0, 0, 0, 0, kCur | kAccess, kCur | kQkey},
  // Any state may be reset or put in error, with no other attribute.
  {IBV_QPS_RESET, IBV_QPS_RESET, 0, 0, 0, 0, 0, 0},
  {IBV_QPS_INIT,  IBV_QPS_RESET, 0, 0, 0, 0, 0, 0},
  {IBV_QPS_RTR,   IBV_QPS_RESET, 0, 0, 0, 0, 0, 0},
  {IBV_QPS_RTS,   IBV_QPS_RESET, 0, 0, 0, 0, 0, 0},
  {IBV_QPS_SQD,   IBV_QPS_RESET, 0, 0, 0, 0, 0, 0},
  {IBV_QPS_SQE,   IBV_QPS_RESET, 0, 0, 0, 0, 0, 0},
  {IBV_QPS_ERR,   IBV_QPS_RESET, 0, 0, 0, 0, 0, 0},
  {IBV_QPS_RESET, IBV_QPS_ERR,   0, 0, 0, 0, 0, 0},  // the kernel refuses this one: docs
  {IBV_QPS_INIT,  IBV_QPS_ERR,   0, 0, 0, 0, 0, 0},
  {IBV_QPS_RTR,   IBV_QPS_ERR,   0, 0, 0, 0, 0, 0},
  {IBV_QPS_RTS,   IBV_QPS_ERR,   0, 0, 0, 0, 0, 0},
  {IBV_QPS_SQD,   IBV_QPS_ERR,   0, 0, 0, 0, 0, 0},
  {IBV_QPS_SQE,   IBV_QPS_ERR,   0, 0, 0, 0, 0, 0},
  {IBV_QPS_ERR,   IBV_QPS_ERR,   0, 0, 0, 0, 0, 0},
  // No RTR -> RTR and no SQE -> SQE: in those states a mask without IBV_QP_STATE is refused.
};
// clang-format on

constexpr int kKnownMask = IBV_QP_STATE | IBV_QP_CUR_STATE | IBV_QP_EN_SQD_ASYNC_NOTIFY |
                           IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY |
                           IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                           IBV_QP_RNR_RETRY | IBV_QP_RQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC |
                           IBV_QP_ALT_PATH | IBV_QP_MIN_RNR_TIMER | IBV_QP_SQ_PSN |
                           IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_PATH_MIG_STATE | IBV_QP_CAP |
                           IBV_QP_DEST_QPN | IBV_QP_RATE_LIMIT;

constexpr std::uint32_t kPsnMask = 0xFF'FFFF;  // PSNs and QPNs are 24-bit (IBA 9.2 BTH)

// An enum field as the integer the caller stored. ibv_qp_attr comes from another process, so
// its enums may hold any value; loading one outside the enum's range as the enum type is
// undefined behaviour, copying its bytes is not.
template <class Enum>
long long raw(const Enum& field) {
  std::underlying_type_t<Enum> value;
  std::memcpy(&value, &field, sizeof value);
  return static_cast<long long>(value);
}

bool valid_state(long long state) { return state >= IBV_QPS_RESET && state <= IBV_QPS_ERR; }

ModifyVerdict refuse(std::string reason) { return {EINVAL, std::move(reason), IBV_QPS_RESET}; }

// The lowest set bit of `mask`, named.
std::string first_bit_name(int mask) {
  return mask_bit_name(mask & -mask);
}

std::string names_of(int mask) {
  std::string out;
  for (int bit = 1; bit != 0 && mask != 0; bit <<= 1) {
    if (!(mask & bit)) continue;
    if (!out.empty()) out += ", ";
    out += mask_bit_name(bit);
    mask &= ~bit;
  }
  return out;
}

ModifyVerdict check_av(const ibv_ah_attr& ah, const QpLimits& limits) {
  // RoCE v2 addresses by GID in the GRH (IBA Annex A17): an AV without one cannot be routed.
  if (!ah.is_global) return refuse("IBV_QP_AV: ah_attr.is_global must be 1 (RoCE v2 needs a GRH)");
  if (ah.port_num != caps::kPortNum) return refuse("IBV_QP_AV: ah_attr.port_num must be 1");
  if (ah.grh.sgid_index >= limits.gid_table_len)
    return refuse("IBV_QP_AV: ah_attr.grh.sgid_index " + std::to_string(ah.grh.sgid_index) +
                  " is outside the GID table");
  if (!caps::is_ipv4_mapped(ah.grh.dgid))
    return refuse("IBV_QP_AV: ah_attr.grh.dgid is not an IPv4-mapped GID (::ffff:a.b.c.d)");
  return {};
}

// Value checks of the attributes named in `mask`, each alone.
ModifyVerdict check_values(const ibv_qp_attr& a, int mask, const QpLimits& limits) {
  const auto has = [mask](int bit) { return (mask & bit) != 0; };
  if (has(kPkey) && a.pkey_index >= caps::kPkeyTableLen)
    return refuse("IBV_QP_PKEY_INDEX: pkey_index must be 0 (one P_Key)");
  if (has(kPort) && a.port_num != caps::kPortNum) return refuse("IBV_QP_PORT: port_num must be 1");
  // qp_access_flags is not checked: the kernel (uverbs' modify_qp, ib_modify_qp) and rxe
  // take any value, and ODP programs pass their MRs' flags (IBV_ACCESS_ON_DEMAND...). The
  // responder reads only the bits a QP grants (REMOTE_WRITE, _READ, _ATOMIC, FLUSH_*).
  if (has(kMtu)) {
    if (raw(a.path_mtu) < IBV_MTU_256 || raw(a.path_mtu) > IBV_MTU_4096)
      return refuse("IBV_QP_PATH_MTU: path_mtu is not an IBV_MTU_* value");
    if (a.path_mtu > limits.active_mtu)
      return refuse("IBV_QP_PATH_MTU: path_mtu " + std::to_string(*caps::mtu_bytes(a.path_mtu)) +
                    " is above the port's active MTU " + std::to_string(*caps::mtu_bytes(limits.active_mtu)));
  }
  if (has(kTimeout) && a.timeout > 31) return refuse("IBV_QP_TIMEOUT: timeout must be 0..31");
  if (has(kRetry) && a.retry_cnt > 7) return refuse("IBV_QP_RETRY_CNT: retry_cnt must be 0..7");
  if (has(kRnrRetry) && a.rnr_retry > 7) return refuse("IBV_QP_RNR_RETRY: rnr_retry must be 0..7");
  if (has(kRnrTimer) && a.min_rnr_timer > 31)
    return refuse("IBV_QP_MIN_RNR_TIMER: min_rnr_timer must be 0..31");
  if (has(kRd) && a.max_rd_atomic > limits.max_rd_atomic)
    return refuse("IBV_QP_MAX_QP_RD_ATOMIC: max_rd_atomic above the device's max_qp_init_rd_atom " +
                  std::to_string(limits.max_rd_atomic));
  if (has(kDestRd) && a.max_dest_rd_atomic > limits.max_dest_rd_atomic)
    return refuse("IBV_QP_MAX_DEST_RD_ATOMIC: max_dest_rd_atomic above the device's max_qp_rd_atom " +
                  std::to_string(limits.max_dest_rd_atomic));
  if (has(kSqPsn) && a.sq_psn > kPsnMask) return refuse("IBV_QP_SQ_PSN: sq_psn must be below 2^24");
  if (has(kRqPsn) && a.rq_psn > kPsnMask) return refuse("IBV_QP_RQ_PSN: rq_psn must be below 2^24");
  if (has(kDestQpn) && a.dest_qp_num > kPsnMask)
    return refuse("IBV_QP_DEST_QPN: dest_qp_num must be below 2^24");
  if (has(kAv)) {
    if (auto v = check_av(a.ah_attr, limits); !v.ok()) return v;
  }
  // We report no IBV_DEVICE_AUTO_PATH_MIG: there is no alternate path to load or arm.
  if (has(kAlt)) return refuse("IBV_QP_ALT_PATH: alternate paths are not supported");
  if (has(kMig) && raw(a.path_mig_state) != IBV_MIG_MIGRATED)
    return refuse("IBV_QP_PATH_MIG_STATE: only IBV_MIG_MIGRATED (no alternate path)");
  return {};
}

}  // namespace

std::optional<TransitionMasks> transition_masks(QpType type, ibv_qp_state from, ibv_qp_state to) {
  for (const Row& row : kRows) {
    if (row.from != from || row.to != to) continue;
    switch (type) {
      case QpType::Rc: return TransitionMasks{row.rc_required, row.rc_optional};
      case QpType::Uc: return TransitionMasks{row.uc_required, row.uc_optional};
      case QpType::Ud: return TransitionMasks{row.ud_required, row.ud_optional};
    }
  }
  return std::nullopt;
}

ModifyVerdict validate_modify(QpType type, ibv_qp_state current, const ibv_qp_attr& attr, int mask,
                              const QpLimits& limits) {
  if (mask & ~kKnownMask) return refuse("unknown attribute mask bits " + std::to_string(mask & ~kKnownMask));
  if (!valid_state(raw(current))) return refuse("the QP's current state is unknown");
  if ((mask & IBV_QP_STATE) && !valid_state(raw(attr.qp_state)))
    return refuse("IBV_QP_STATE: qp_state is not a QP state");
  const ibv_qp_state next = (mask & IBV_QP_STATE) ? attr.qp_state : current;
  const auto masks = transition_masks(type, current, next);
  if (!masks)
    return refuse(std::string("no transition ") + state_name(current) + " -> " + state_name(next) +
                  ((mask & IBV_QP_STATE) ? "" : " (a mask without IBV_QP_STATE modifies in place)"));
  // IBV_QP_CUR_STATE asserts what the caller believes the state to be (it may have missed
  // an asynchronous move to SQE); we know the true state, so a wrong belief is refused.
  if ((mask & IBV_QP_CUR_STATE) && (masks->optional & IBV_QP_CUR_STATE) && raw(attr.cur_qp_state) != current)
    return refuse(std::string("IBV_QP_CUR_STATE: cur_qp_state is not ") + state_name(current) +
                  ", the QP's state");
  if (const int missing = masks->required & ~mask)
    return refuse(std::string(state_name(current)) + " -> " + state_name(next) + " requires " +
                  first_bit_name(missing) + " (missing: " + names_of(missing) + ")");
  if (const int extra = mask & ~(masks->required | masks->optional | IBV_QP_STATE))
    return refuse(std::string(state_name(current)) + " -> " + state_name(next) + " does not allow " +
                  first_bit_name(extra) + " (not allowed: " + names_of(extra) + ")");
  ModifyVerdict verdict = check_values(attr, mask, limits);
  verdict.next_state = next;
  return verdict;
}

const char* mask_bit_name(int bit) {
  switch (bit) {
    case IBV_QP_STATE: return "IBV_QP_STATE";
    case IBV_QP_CUR_STATE: return "IBV_QP_CUR_STATE";
    case IBV_QP_EN_SQD_ASYNC_NOTIFY: return "IBV_QP_EN_SQD_ASYNC_NOTIFY";
    case IBV_QP_ACCESS_FLAGS: return "IBV_QP_ACCESS_FLAGS";
    case IBV_QP_PKEY_INDEX: return "IBV_QP_PKEY_INDEX";
    case IBV_QP_PORT: return "IBV_QP_PORT";
    case IBV_QP_QKEY: return "IBV_QP_QKEY";
    case IBV_QP_AV: return "IBV_QP_AV";
    case IBV_QP_PATH_MTU: return "IBV_QP_PATH_MTU";
    case IBV_QP_TIMEOUT: return "IBV_QP_TIMEOUT";
    case IBV_QP_RETRY_CNT: return "IBV_QP_RETRY_CNT";
    case IBV_QP_RNR_RETRY: return "IBV_QP_RNR_RETRY";
    case IBV_QP_RQ_PSN: return "IBV_QP_RQ_PSN";
    case IBV_QP_MAX_QP_RD_ATOMIC: return "IBV_QP_MAX_QP_RD_ATOMIC";
    case IBV_QP_ALT_PATH: return "IBV_QP_ALT_PATH";
    case IBV_QP_MIN_RNR_TIMER: return "IBV_QP_MIN_RNR_TIMER";
    case IBV_QP_SQ_PSN: return "IBV_QP_SQ_PSN";
    case IBV_QP_MAX_DEST_RD_ATOMIC: return "IBV_QP_MAX_DEST_RD_ATOMIC";
    case IBV_QP_PATH_MIG_STATE: return "IBV_QP_PATH_MIG_STATE";
    case IBV_QP_CAP: return "IBV_QP_CAP";
    case IBV_QP_DEST_QPN: return "IBV_QP_DEST_QPN";
    case IBV_QP_RATE_LIMIT: return "IBV_QP_RATE_LIMIT";
    default: return "unknown";
  }
}

const char* state_name(ibv_qp_state state) { return rocev2::name(static_cast<rocev2::QpState>(state)).data(); }

}  // namespace rrdma::verbs
