// rrdma_capture_check: checks every RoCE v2 frame of a capture with the project's own parser
// and ICRC (rocev2::parse_frame), and reports, per sending address, what the sender chose
// where the spec leaves a choice (UDP source port, AckReq, MigReq, TTL, DSCP/ECN, pad).
//
//   rrdma_capture_check FILE [--expect-source A.B.C.D]... [--qp-pair QPN QPN] [--check-udp-ports]
//
// --qp-pair: the two QPNs of one RC/UC connection (0x prefix for hex); every RC/UC frame
// addressed to either must carry the UDP source port our encap computes for the pair
// (rocev2::udp_source_port_connected), i.e. rxe and we must hash connections alike.
// --check-udp-ports: the same for every connection of the capture, found without being
// told: an RC/UC flow A->B on port P to QPN y must have a reverse flow B->A on the same
// port to some QPN x with P == udp_source_port_connected(x, y); and every UD frame must
// carry udp_source_port_datagram() of its DETH's source QP (QP 1's MADs: 0xD872).
// A connection the CM made (rdma_cm) has its port from the flow label of its REQ's primary
// path instead (rxe: rdma_get_udp_sport in modify_qp with the CM's address vector), which
// the checker learns from the REQs and REPs in the capture: the REQ gives the active QPN and
// the flow label, the REP with the REQ's comm ID the passive QPN; such a pair's flows must be
// on udp_source_port_connected(x, y, flow label).
// Frames to QP 0 or 1 must be MADs rxe's GSI QP takes (rocev2::check_gsi_packet); CM MADs
// (class 7) must parse with our codec (rocev2/cm/mad.h). The CM messages each sender sent
// are counted in its summary.
// Frames that are not IPv4/UDP to port 4791 (ARP, TCP of the pingpong's setup) are skipped.
// Exit status: 0 when every RoCE frame parses with a good ICRC (and the right source port),
// and every expected source sent at least one; 1 when not (each bad frame is named on
// stderr); 2 on a usage or file error.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <optional>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rocev2/cm/mad.h"
#include "rocev2/encap.h"
#include "rocev2/gsi.h"
#include "rocev2/opcode.h"
#include "stack/addresses.h"
#include "tests/capture_file.h"

namespace {

using rrdma::rocev2::FrameError;

struct SenderSummary {
  std::size_t packets = 0;
  std::size_t ack_req = 0;
  std::size_t mig_req = 0;
  std::size_t max_payload = 0;  // the largest payload sent: the path MTU in use, or less
  std::map<std::string_view, std::size_t> opcodes;
  std::map<std::string_view, std::size_t> cm_messages;  // CM MADs by attribute name
  std::set<unsigned> udp_source_ports;
  std::set<unsigned> ttls;
  std::set<unsigned> dscp_ecn;
  std::set<unsigned> pad_counts;
  std::set<bool> dont_fragment;
};

struct Options {
  std::string path;
  std::vector<rrdma::stack::Ipv4Address> expected_sources;
  std::optional<std::pair<rrdma::rocev2::Qpn, rrdma::rocev2::Qpn>> qp_pair;
  bool check_udp_ports = false;
};

// One direction of RC/UC traffic on one UDP source port, and the QPNs it went to.
struct Flow {
  rrdma::stack::Ipv4Address source;
  rrdma::stack::Ipv4Address destination;
  std::uint16_t udp_source_port = 0;
  auto operator<=>(const Flow&) const = default;
};
using Flows = std::map<Flow, std::set<std::uint32_t>>;

// What the CM MADs of the capture say about connections: the REQs by (active address, local
// comm ID), and the QP pairs with the flow label of their REQ once a REP answered.
struct CmRequest {
  std::uint32_t qpn = 0;
  std::uint32_t flow_label = 0;
};
struct CmConnections {
  std::map<std::pair<rrdma::stack::Ipv4Address, std::uint32_t>, CmRequest> requests;
  std::map<std::pair<std::uint32_t, std::uint32_t>, std::set<std::uint32_t>> flow_labels;  // {qpn, qpn} sorted
  std::size_t reps_without_req = 0;
};

// Not RoCE v2 at all, as opposed to RoCE v2 that is broken.
bool is_other_traffic(FrameError e) {
  return e == FrameError::not_ipv4 || e == FrameError::not_udp || e == FrameError::not_roce_port;
}

template <typename T>
std::string join(const std::set<T>& values) {
  std::string out;
  for (const T& v : values) out += (out.empty() ? "" : ",") + std::to_string(v);
  return out;
}

void record(SenderSummary& s, const rrdma::rocev2::RoceFrame& f) {
  ++s.packets;
  s.ack_req += f.packet.bth.ack_req ? 1 : 0;
  s.mig_req += f.packet.bth.mig_req ? 1 : 0;
  s.max_payload = std::max(s.max_payload, f.packet.payload.size());
  ++s.opcodes[rrdma::rocev2::opcode_info(f.packet.bth.opcode).name];
  s.udp_source_ports.insert(f.headers.udp.source_port);
  s.ttls.insert(f.headers.ipv4.ttl);
  s.dscp_ecn.insert(unsigned(f.headers.ipv4.dscp) << 2 | f.headers.ipv4.ecn);
  s.pad_counts.insert(f.packet.bth.pad_count);
  s.dont_fragment.insert(f.headers.ipv4.dont_fragment);
}

void print(const rrdma::stack::Ipv4Address& source, const SenderSummary& s) {
  std::printf("source %s packets %zu ackreq %zu migreq %zu max_payload %zu udp_sport %s ttl %s tos %s pad %s df %s\n",
              source.to_string().c_str(), s.packets, s.ack_req, s.mig_req, s.max_payload,
              join(s.udp_source_ports).c_str(),
              join(s.ttls).c_str(), join(s.dscp_ecn).c_str(), join(s.pad_counts).c_str(),
              join(s.dont_fragment).c_str());
  for (const auto& [name, count] : s.opcodes) {
    std::printf("  %-28.*s %zu\n", int(name.size()), name.data(), count);
  }
  for (const auto& [name, count] : s.cm_messages) {
    std::printf("  CM %-25.*s %zu\n", int(name.size()), name.data(), count);
  }
}

// A frame to QP 0 or 1: a MAD rxe's GSI QP would take, and if it is a CM MAD one our codec
// parses. Empty when it is; the reason otherwise. A CM message's REQ or REP goes into `cm`.
std::string gsi_problem(const rrdma::rocev2::RoceFrame& f, SenderSummary& s, CmConnections& cm) {
  using namespace rrdma::rocev2;
  const GsiDrop drop = check_gsi_packet(f.packet);
  if (drop != GsiDrop::none) return "not a MAD rxe's GSI QP takes: " + std::string(to_string(drop));
  if (f.packet.payload.size() < 2 || f.packet.payload[1] != 0x07) return {};  // not the CM's class
  cm::CmMessage m;
  const cm::CmError error = cm::parse_cm_mad(f.packet.payload, m);
  if (error != cm::CmError::none) return "CM MAD refused by our codec: " + std::string(cm::to_string(error));
  ++s.cm_messages[cm::attribute_name(cm::attribute_id(m.body))];
  if (const auto* req = std::get_if<cm::Req>(&m.body)) {
    cm.requests[{f.headers.ipv4.source, req->local_comm_id.value()}] = {req->local_qpn.value(),
                                                                        req->primary_path.flow_label};
  } else if (const auto* rep = std::get_if<cm::Rep>(&m.body)) {
    const auto it = cm.requests.find({f.headers.ipv4.destination, rep->remote_comm_id.value()});
    if (it == cm.requests.end()) {
      ++cm.reps_without_req;
    } else {
      const std::uint32_t a = it->second.qpn, b = rep->local_qpn.value();
      cm.flow_labels[{std::min(a, b), std::max(a, b)}].insert(it->second.flow_label);
    }
  }
  return {};
}

std::optional<rrdma::rocev2::Qpn> parse_qpn(const char* text) {
  char* end = nullptr;
  const unsigned long value = std::strtoul(text, &end, 0);
  if (end == text || *end != '\0' || value > 0xFF'FFFF) return std::nullopt;
  return rrdma::rocev2::Qpn(static_cast<std::uint32_t>(value));
}

bool is_connected_service(rrdma::rocev2::Opcode op) {
  const auto flags = rrdma::rocev2::opcode_info(op).flags;
  return flags.has(rrdma::rocev2::OpcodeFlags::kRc) || flags.has(rrdma::rocev2::OpcodeFlags::kUc);
}

// Empty when the frame's UDP source port is what we would send for the connection.
std::string_view port_mismatch(const Options& options, const rrdma::rocev2::RoceFrame& f) {
  if (!options.qp_pair || !is_connected_service(f.packet.bth.opcode)) return {};
  const auto [a, b] = *options.qp_pair;
  if (f.packet.bth.dest_qp != a && f.packet.bth.dest_qp != b) return {};
  if (f.headers.udp.source_port == rrdma::rocev2::udp_source_port_connected(a, b)) return {};
  return "UDP source port is not udp_source_port_connected() of the QP pair";
}

std::string_view datagram_port_mismatch(const Options& options, const rrdma::rocev2::RoceFrame& f) {
  if (!options.check_udp_ports || !f.packet.deth) return {};
  if (f.headers.udp.source_port == rrdma::rocev2::udp_source_port_datagram(f.packet.deth->src_qp)) return {};
  return "UD UDP source port is not udp_source_port_datagram() of the DETH's source QP";
}

void record_flow(Flows& flows, const rrdma::rocev2::RoceFrame& f) {
  if (!is_connected_service(f.packet.bth.opcode)) return;
  flows[{f.headers.ipv4.source, f.headers.ipv4.destination, f.headers.udp.source_port}].insert(
      f.packet.bth.dest_qp.value());
}

// Each flow pairs with its reverse on the same port, and the port is the QP pair's.
// Returns the number of flows that do not; names each on stderr.
bool cm_port(const CmConnections& cm, std::uint32_t x, std::uint32_t y, std::uint16_t port) {
  const auto it = cm.flow_labels.find({std::min(x, y), std::max(x, y)});
  if (it == cm.flow_labels.end()) return false;
  for (std::uint32_t label : it->second)
    if (port == rrdma::rocev2::udp_source_port_connected(rrdma::rocev2::Qpn(x), rrdma::rocev2::Qpn(y), label))
      return true;
  return false;
}

std::size_t check_flows(const Flows& flows, const CmConnections& cm) {
  std::size_t bad = 0;
  for (const auto& [flow, to_qpns] : flows) {
    const auto reverse = flows.find({flow.destination, flow.source, flow.udp_source_port});
    bool matched = false;
    if (reverse != flows.end()) {
      for (std::uint32_t y : to_qpns)
        for (std::uint32_t x : reverse->second)
          matched = matched ||
                    flow.udp_source_port ==
                        rrdma::rocev2::udp_source_port_connected(rrdma::rocev2::Qpn(x), rrdma::rocev2::Qpn(y)) ||
                    cm_port(cm, x, y, flow.udp_source_port);
    }
    if (!matched) {
      ++bad;
      std::fprintf(stderr, "flow %s -> %s port %u: %s\n", flow.source.to_string().c_str(),
                   flow.destination.to_string().c_str(), unsigned(flow.udp_source_port),
                   reverse == flows.end() ? "no reverse flow on the same port"
                                          : "port is not udp_source_port_connected() of its QPNs, nor of a "
                                            "CM flow label");
    }
  }
  return bad;
}

bool parse_options(int argc, char** argv, Options& options) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == "--expect-source" && i + 1 < argc) {
      const auto address = rrdma::stack::Ipv4Address::parse(argv[++i]);
      if (!address) return false;
      options.expected_sources.push_back(*address);
    } else if (arg == "--qp-pair" && i + 2 < argc) {
      const auto a = parse_qpn(argv[i + 1]);
      const auto b = parse_qpn(argv[i + 2]);
      if (!a || !b) return false;
      options.qp_pair.emplace(*a, *b);
      i += 2;
    } else if (arg == "--check-udp-ports") {
      options.check_udp_ports = true;
    } else if (options.path.empty() && !arg.starts_with("-")) {
      options.path = arg;
    } else {
      return false;
    }
  }
  return !options.path.empty();
}

int check(const Options& options) {
  const std::vector<rrdma::test::Frame> frames = rrdma::test::read_capture(options.path);
  std::map<rrdma::stack::Ipv4Address, SenderSummary> senders;
  Flows flows;
  CmConnections cm;
  std::size_t bad = 0;
  for (std::size_t i = 0; i < frames.size(); ++i) {
    rrdma::rocev2::RoceFrame frame;
    const rrdma::rocev2::RoceFrameCheck result = rrdma::rocev2::parse_frame(frames[i], frame);
    if (is_other_traffic(result.error)) continue;
    std::string why;
    if (!result.ok()) {
      why = result.error == FrameError::bad_transport ? rrdma::rocev2::to_string(result.transport)
                                                      : rrdma::rocev2::to_string(result.error);
    } else {
      why = port_mismatch(options, frame);
      if (why.empty()) why = datagram_port_mismatch(options, frame);
      if (why.empty() && rrdma::rocev2::is_management_qp(frame.packet.bth.dest_qp))
        why = gsi_problem(frame, senders[frame.headers.ipv4.source], cm);
    }
    if (!why.empty()) {
      ++bad;
      // Frame numbers count from 1, as Wireshark shows them.
      std::fprintf(stderr, "frame %zu: %.*s\n", i + 1, int(why.size()), why.data());
      continue;
    }
    record(senders[frame.headers.ipv4.source], frame);
    record_flow(flows, frame);
  }
  const std::size_t bad_flows = options.check_udp_ports ? check_flows(flows, cm) : 0;
  std::size_t total = 0;
  for (const auto& [source, summary] : senders) {
    print(source, summary);
    total += summary.packets;
  }
  std::printf("roce frames %zu good, %zu bad, %zu other frames\n", total, bad, frames.size() - total - bad);
  if (options.check_udp_ports) std::printf("connected flows %zu, %zu without a matching port\n", flows.size(), bad_flows);
  if (!cm.requests.empty()) {
    std::printf("cm REQs %zu, connections with a REP %zu (flow labels:", cm.requests.size(), cm.flow_labels.size());
    for (const auto& [pair, labels] : cm.flow_labels)
      for (std::uint32_t label : labels) std::printf(" qpn 0x%06x-0x%06x 0x%05x", pair.first, pair.second, label);
    std::printf("), REPs without a REQ %zu\n", cm.reps_without_req);
  }
  int status = bad == 0 && bad_flows == 0 ? 0 : 1;
  for (const auto& source : options.expected_sources) {
    if (!senders.contains(source)) {
      std::fprintf(stderr, "no RoCE frame from %s\n", source.to_string().c_str());
      status = 1;
    }
  }
  return status;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  if (!parse_options(argc, argv, options)) {
    std::fprintf(stderr, "usage: %s FILE [--expect-source A.B.C.D]... [--qp-pair QPN QPN] [--check-udp-ports]\n", argv[0]);
    return 2;
  }
  try {
    return check(options);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", argv[0], e.what());
    return 2;
  }
}
