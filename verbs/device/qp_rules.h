// The verbs QP state machine for RC, UC and UD: which modify_qp() transitions exist, which
// attributes each one requires and allows (ibv_modify_qp(3) for the required ones, the
// kernel's ib_modify_qp_is_ok() table for the optional ones, IBA ch. 10/11), and the checks
// of each attribute's value that need no other resource. docs/VERBS_QP.md has the table.
// Pure: the daemon calls validate_modify() before touching a QP, so a refused modify leaves
// it as it was (ibv_modify_qp(3), NOTES).
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <optional>
#include <string>

#include "rocev2/engine/work.h"
#include "verbs/device/device_caps.h"

namespace rrdma::verbs {

// The attributes a transition requires and allows beyond IBV_QP_STATE, as IBV_QP_* masks.
struct TransitionMasks {
  int required = 0;
  int optional = 0;
};

// nullopt when from -> to is no transition of the verbs state machine.
std::optional<TransitionMasks> transition_masks(rocev2::QpType type, ibv_qp_state from, ibv_qp_state to);

// What the values are checked against: the device's limits and the port's active MTU.
struct QpLimits {
  ibv_mtu active_mtu = IBV_MTU_1024;  // port_attributes().active_mtu at the netdev MTU
  std::uint8_t max_rd_atomic = caps::kMaxQpInitRdAtom;
  std::uint8_t max_dest_rd_atomic = caps::kMaxQpRdAtom;
  int gid_table_len = caps::kGidTableLen;
};

struct ModifyVerdict {
  int error = 0;        // 0 or EINVAL
  std::string reason;   // names the attribute, empty when error == 0
  ibv_qp_state next_state = IBV_QPS_RESET;  // where the QP goes when error == 0
  bool ok() const { return error == 0; }
};

// Whether ibv_modify_qp(attr, mask) may run on a QP of `type` now in `current`. Without
// IBV_QP_STATE in the mask the call modifies attributes in place (current -> current).
ModifyVerdict validate_modify(rocev2::QpType type, ibv_qp_state current, const ibv_qp_attr& attr,
                              int mask, const QpLimits& limits = {});

// "IBV_QP_AV" for one mask bit; "unknown" for bits verbs.h does not define.
const char* mask_bit_name(int bit);
const char* state_name(ibv_qp_state state);

}  // namespace rrdma::verbs
