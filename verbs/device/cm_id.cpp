// Runs in the daemon: an rdma_cm id's states and their changes (cm_id.h).
#include "verbs/device/cm_id.h"

namespace rrdma::verbs {

std::string_view to_string(CmIdState state) {
  switch (state) {
    case CmIdState::Idle: return "IDLE";
    case CmIdState::AddrQuery: return "ADDR_QUERY";
    case CmIdState::AddrResolved: return "ADDR_RESOLVED";
    case CmIdState::RouteResolved: return "ROUTE_RESOLVED";
    case CmIdState::Connect: return "CONNECT";
    case CmIdState::Disconnect: return "DISCONNECT";
    case CmIdState::AddrBound: return "ADDR_BOUND";
    case CmIdState::Listen: return "LISTEN";
    case CmIdState::Destroying: return "DESTROYING";
  }
  return "?";
}

bool legal_transition(CmIdState from, CmIdState to) {
  using S = CmIdState;
  if (to == S::Destroying) return from != S::Destroying;
  switch (from) {
    case S::Idle: return to == S::AddrBound || to == S::Connect;
    case S::AddrBound: return to == S::AddrQuery || to == S::Listen;
    case S::AddrQuery: return to == S::AddrResolved || to == S::AddrBound;
    case S::AddrResolved: return to == S::RouteResolved;
    case S::RouteResolved: return to == S::Connect;
    case S::Connect: return to == S::Disconnect;
    case S::Listen: return to == S::AddrBound;
    case S::Disconnect:
    case S::Destroying: return false;
  }
  return false;
}

bool has_peer(CmIdState state) {
  using S = CmIdState;
  return state == S::AddrQuery || state == S::AddrResolved || has_route(state);
}

bool has_route(CmIdState state) {
  using S = CmIdState;
  return state == S::RouteResolved || state == S::Connect || state == S::Disconnect;
}

std::string describe_transition(std::uint32_t id, CmIdState from, CmIdState to) {
  std::string line = "rdma_cm id " + std::to_string(id) + ": ";
  line += to_string(from);
  line += " -> ";
  line += to_string(to);
  return line;
}

bool CmIdMachine::move(CmId& id, CmIdState to) {
  const CmIdState from = id.state_;
  if (!legal_transition(from, to)) {
    ++refused_;
    return false;
  }
  id.state_ = to;
  if (observer_ != nullptr) observer_->on_cm_id_transition(id.id, from, to);
  return true;
}

}  // namespace rrdma::verbs
