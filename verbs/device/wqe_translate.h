// The daemon's translation between the ring ABI (verbs/contract/abi.h) and the engine's
// forms (rocev2/engine/work.h): WQEs into work requests, completions into CQEs. The
// contract itself knows nothing of the engine; this is the device side's half of the bridge.
#pragma once

#include "rocev2/engine/work.h"
#include "verbs/contract/abi.h"

namespace rrdma::verbs {

// The engine's forms. Preconditions: the WQE passed its check. A UD WQE's destination stays
// empty: the daemon resolves ah_handle in its own AH table and fills ud_dest_ip and
// ud_traffic_class.
rocev2::SendWr to_send_wr(const SendWqe& wqe);
rocev2::RecvWr to_recv_wr(const RecvWqe& wqe);
// to_recv_wr into an empty RecvWr where it lives: a receive queue's head is built in place
// rather than moved in (nic_queues.cpp says why).
void fill_recv_wr(const RecvWqe& wqe, rocev2::RecvWr& wr);
Cqe to_cqe(const rocev2::Completion& completion);

}  // namespace rrdma::verbs
