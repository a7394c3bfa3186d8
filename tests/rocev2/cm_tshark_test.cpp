// Cross-checks the CM MAD codec against Wireshark's InfiniBand dissector: writes a pcapng with
// one RoCE v2 frame per message of tests/rocev2/cm_samples.h, each a UD SEND_ONLY to QP 1
// (P_Key 0xFFFF, Q_Key 0x80010000, source QP 1, as rxe sends GSI MADs), has
// `tshark -r FILE -V` decode them, and checks that nothing is malformed, that the first frame
// is a CM ConnectRequest with every field we put in, and that the others carry their message's
// name and the fields Wireshark 4.0 decodes (it names but does not decode MRA and SIDR).
// Then decodes rxe's own CM capture (tests/data/rxe_cm.pcapng) the same way: nothing malformed,
// every message named.
// Prints "SKIPPED: ..." and exits 77 (ctest's skip code) without tshark: a ctest of its own,
// not a Catch2 case, so that the skip shows in ctest's summary.
//   cm_tshark_test [FILE]   FILE: where to keep the pcapng (default: a temporary file, removed)
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <variant>
#include <vector>

#include "rocev2/encap.h"
#include "tests/rocev2/cm_samples.h"

namespace {

using namespace rrdma;
using namespace rrdma::rocev2;
using Bytes = std::vector<std::uint8_t>;

constexpr Qpn kGsiQpn{1};
constexpr Qkey kGsiQkey{0x80010000};

// A MAD as the payload of a GSI datagram, in an Ethernet frame from the active side to the
// passive side.
Bytes gsi_frame(const Bytes& mad) {
  TransportPacket p;
  p.bth = Bth{.opcode = Opcode::UdSendOnly, .pkey = kDefaultPkey, .dest_qp = kGsiQpn, .psn = Psn{0x1234}};
  p.deth = Deth{.qkey = kGsiQkey, .src_qp = kGsiQpn};
  p.payload = mad;
  const RoceHeaders h = roce_headers(stack::MacAddress{{0x02, 0x00, 0x0A, 0x42, 0x00, 0x02}},
                                     stack::MacAddress{{0x02, 0x00, 0x0A, 0x42, 0x00, 0x01}}, cm::test::kActiveIp,
                                     cm::test::kPassiveIp, udp_source_port_datagram(kGsiQpn), 1);
  Bytes frame(frame_length(p));
  if (build_frame(h, p, frame) != EmitError::none) throw std::runtime_error("build_frame refused the GSI packet");
  return frame;
}

// --- A minimal pcapng: section header, one Ethernet interface, an enhanced packet block per
// frame.
// Little-endian throughout (the byte-order magic tells readers so).
void put32(Bytes& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}
void put16(Bytes& out, std::uint16_t v) {
  out.push_back(static_cast<std::uint8_t>(v));
  out.push_back(static_cast<std::uint8_t>(v >> 8));
}

Bytes pcapng(const std::vector<Bytes>& frames) {
  Bytes out;
  put32(out, 0x0A0D0D0A);  // section header block
  put32(out, 28);
  put32(out, 0x1A2B3C4D);  // byte-order magic
  put16(out, 1);           // version 1.0
  put16(out, 0);
  put32(out, 0xFFFFFFFF);  // section length: unknown
  put32(out, 0xFFFFFFFF);
  put32(out, 28);
  put32(out, 1);           // interface description block
  put32(out, 20);
  put16(out, 1);           // LINKTYPE_ETHERNET
  put16(out, 0);
  put32(out, 0);           // no snap length
  put32(out, 20);
  for (const Bytes& frame : frames) {
    const auto padded = static_cast<std::uint32_t>((frame.size() + 3) / 4 * 4);
    put32(out, 6);  // enhanced packet block
    put32(out, 32 + padded);
    put32(out, 0);  // interface 0
    put32(out, 0);  // timestamp (high, low) in microseconds
    put32(out, 1);
    put32(out, static_cast<std::uint32_t>(frame.size()));  // captured length
    put32(out, static_cast<std::uint32_t>(frame.size()));  // original length
    out.insert(out.end(), frame.begin(), frame.end());
    out.resize(out.size() + (padded - frame.size()), 0);
    put32(out, 32 + padded);
  }
  return out;
}

bool on_path(const std::string& program) {
  const char* path = std::getenv("PATH");
  std::string dirs = path ? path : "/usr/bin:/bin";
  std::size_t start = 0;
  while (start <= dirs.size()) {
    const std::size_t end = std::min(dirs.find(':', start), dirs.size());
    const std::string candidate = dirs.substr(start, end - start) + "/" + program;
    if (::access(candidate.c_str(), X_OK) == 0) return true;
    start = end + 1;
  }
  return false;
}

std::string run(const std::string& command) {
  std::string out;
  FILE* pipe = ::popen(command.c_str(), "r");
  if (!pipe) return out;
  std::array<char, 4096> buf;
  for (std::size_t n; (n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0;) out.append(buf.data(), n);
  ::pclose(pipe);
  return out;
}

// printf into a std::string, for the lines expected in the decode.
template <typename... Args>
std::string format(const char* f, Args... args) {
  char buf[160];
  std::snprintf(buf, sizeof buf, f, args...);
  return buf;
}

std::string ipv4_text(stack::Ipv4Address a) { return a.to_string(); }

// The lines the decode of the REQ must contain, from the value we emitted (Wireshark's own
// formatting of each field). Not the primary flow label or packet rate: Wireshark 4.0 reads
// the flow label from 3 bytes and the packet rate from the first byte of the 32-bit word the
// kernel's ibta_vol1_c12.h (CM_REQ_PRIMARY_FLOW_LABEL, ..._PACKET_RATE) and IBA Table 106 give
// them, so it shows 0x00307 for our 0x307c6 (docs/RDMA_CM.md).
std::vector<std::string> req_lines(const cm::CmMessage& m) {
  const auto& r = std::get<cm::Req>(m.body);
  const auto ip = cm::parse_ip_service_id(r.service_id);
  const auto cma = cm::parse_cma_header(r.private_data.bytes);
  if (!ip || !cma) throw std::runtime_error("the sample REQ has no IP service ID or CMA header");
  return {
      "Opcode: Unreliable Datagram (UD) - SEND only (100)",
      "Partition Key: 65535",
      "Destination Queue Pair: 0x000001",
      "Queue Key: 0x0000000080010000",
      "Source Queue Pair: 0x00000001",
      "Base Version: 0x01",
      "Management Class: 0x07",
      "Class Version: 0x02",
      "Method: Send() (0x03)",
      format("Transaction ID: 0x%016llx", static_cast<unsigned long long>(m.transaction_id)),
      "Attribute ID: 0x0010",
      "CM ConnectRequest",
      format("Local Communication ID: 0x%08x", r.local_comm_id.value()),
      format("Protocol: 0x%02x", static_cast<unsigned>(ip->port_space) & 0xFF),
      format("Destination Port: 0x%04x", unsigned{ip->port}),
      format("Local CA GUID: 0x%016llx", static_cast<unsigned long long>(r.local_ca_guid)),
      format("Local Q_Key: 0x%08x", r.local_qkey.value()),
      format("Local QPN: 0x%06x", r.local_qpn.value()),
      format("Responder Resources: 0x%02x", unsigned{r.responder_resources}),
      format("Initiator Depth: 0x%02x", unsigned{r.initiator_depth}),
      format("= Remote CM Response Timeout: 0x%02x", unsigned{r.remote_cm_response_timeout}),
      format("= Transport Service Type: 0x%x", unsigned{static_cast<std::uint8_t>(r.transport_service_type)}),
      format("Starting PSN: 0x%06x", r.starting_psn.value()),
      format("= Local CM Response Timeout: 0x%02x", unsigned{r.local_cm_response_timeout}),
      format("= Retry Count: 0x%x", unsigned{r.retry_count}),
      format("Partition Key: 0x%04x", unsigned{r.partition_key.value()}),
      format("= Path Packet Payload MTU: 0x%x", unsigned{static_cast<std::uint8_t>(r.path_packet_payload_mtu)}),
      format("= RNR Retry Count: 0x%x", unsigned{r.rnr_retry_count}),
      format("= Max CM Retries: 0x%x", unsigned{r.max_cm_retries}),
      format("Primary Local Port LID: %u", unsigned{r.primary_path.local_port_lid}),
      format("Primary Remote Port LID: %u", unsigned{r.primary_path.remote_port_lid}),
      "Primary Local Port GID: " + ipv4_text(cm::test::kActiveIp),
      "Primary Remote Port GID: " + ipv4_text(cm::test::kPassiveIp),
      format("Primary Hop Limit: 0x%02x", unsigned{r.primary_path.hop_limit}),
      format("= Primary Local ACK Timeout: 0x%02x", unsigned{r.primary_path.local_ack_timeout}),
      "= IP CM IP Version: 0x4",
      format("IP CM Source Port: 0x%04x", unsigned{cma->source_port}),
      "IP CM Source IP: " + ipv4_text(*cm::cma_source_ipv4(*cma)),
      "IP CM Destination IP: " + ipv4_text(*cm::cma_destination_ipv4(*cma)),
  };
}

// The name Wireshark gives each message, and what it decodes of the others.
std::vector<std::string> other_lines(const cm::CmMessage& m) {
  return std::visit(
      [&](const auto& b) -> std::vector<std::string> {
        using M = std::remove_cvref_t<decltype(b)>;
        if constexpr (std::is_same_v<M, cm::Req>) {
          return {"CM ConnectRequest"};
        } else if constexpr (std::is_same_v<M, cm::Mra>) {
          return {"CM MsgRcptAck"};
        } else if constexpr (std::is_same_v<M, cm::SidrReq>) {
          return {"CM ServiceIDResReq"};
        } else if constexpr (std::is_same_v<M, cm::SidrRep>) {
          return {"CM ServiceIDResReqResp"};
        } else {
          std::vector<std::string> lines{format("Local Communication ID: 0x%08x", b.local_comm_id.value()),
                                         format("Remote Communication ID: 0x%08x", b.remote_comm_id.value())};
          if constexpr (std::is_same_v<M, cm::Rep>) {
            lines.insert(lines.end(), {"CM ConnectReply", format("Local QPN: 0x%06x", b.local_qpn.value()),
                                       format("Starting PSN: 0x%06x", b.starting_psn.value()),
                                       format("= Target ACK Delay: 0x%02x", unsigned{b.target_ack_delay}),
                                       format("= RNR Retry Count: 0x%x", unsigned{b.rnr_retry_count}),
                                       format("Local CA GUID: 0x%016llx",
                                              static_cast<unsigned long long>(b.local_ca_guid))});
          } else if constexpr (std::is_same_v<M, cm::Rej>) {
            lines.insert(lines.end(), {"CM ConnectReject", format("Reason: 0x%04x", unsigned{static_cast<std::uint16_t>(b.reason)}),
                                       format("= Reject Info Length: 0x%02x", unsigned(b.ari.bytes.size()))});
          } else if constexpr (std::is_same_v<M, cm::Rtu>) {
            lines.push_back("CM ReadyToUse");
          } else if constexpr (std::is_same_v<M, cm::Dreq>) {
            lines.insert(lines.end(), {"CM DisconnectRequest", format("Remote QPN/EECN: 0x%06x", b.remote_qpn_eecn.value())});
          } else if constexpr (std::is_same_v<M, cm::Drep>) {
            lines.push_back("CM DisconnectReply");
          }
          return lines;
        }
      },
      m.body);
}

// The decode of each frame: the text from one "Frame N:" line to the next.
std::vector<std::string> split_frames(const std::string& decode) {
  std::vector<std::string> frames;
  std::size_t at = decode.find("Frame 1:");
  while (at != std::string::npos) {
    const std::size_t next = decode.find("\nFrame ", at + 1);
    frames.push_back(decode.substr(at, next == std::string::npos ? std::string::npos : next + 1 - at));
    at = next == std::string::npos ? next : next + 1;
  }
  return frames;
}

}  // namespace

int main(int argc, char** argv) {
  if (!on_path("tshark")) {
    std::cout << "SKIPPED: tshark is not installed (apt-get install tshark): the CM messages were NOT "
                 "cross-checked against Wireshark's InfiniBand dissector\n";
    return 77;
  }
  const std::vector<cm::CmMessage> messages = cm::test::kernel_samples();
  std::vector<Bytes> frames;
  for (const cm::CmMessage& m : messages) {
    Bytes mad(cm::kMadLength);
    if (const cm::CmError e = cm::emit_cm_mad(m, mad); e != cm::CmError::none) {
      std::cout << "FAILED: a sample does not emit: " << cm::to_string(e) << "\n";
      return 1;
    }
    frames.push_back(gsi_frame(mad));
  }

  namespace fs = std::filesystem;
  const bool keep = argc > 1;
  const fs::path file =
      keep ? fs::path(argv[1]) : fs::temp_directory_path() / ("rrdma-cm-" + std::to_string(::getpid()) + ".pcapng");
  {
    const Bytes bytes = pcapng(frames);
    std::ofstream out(file, std::ios::binary);
    out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  const std::string decode = run("tshark -r '" + file.string() + "' -V 2>&1");
  if (!keep) fs::remove(file);

  std::vector<std::string> failures;
  for (const char* bad : {"Malformed", "Expert Info", "Dissector bug", "Exception"})
    if (decode.find(bad) != std::string::npos) failures.push_back(std::string("the decode says \"") + bad + "\"");
  const std::vector<std::string> decoded = split_frames(decode);
  if (decoded.size() != messages.size()) failures.push_back(format("%zu frames decoded, %zu written", decoded.size(), messages.size()));
  std::size_t checked = 0;
  for (std::size_t i = 0; i < decoded.size() && i < messages.size(); ++i) {
    const std::vector<std::string> lines = i == 0 ? req_lines(messages[i]) : other_lines(messages[i]);
    for (const std::string& line : lines) {
      ++checked;
      if (decoded[i].find(line) == std::string::npos)
        failures.push_back(format("frame %zu (%s): no \"", i + 1, cm::describe(messages[i]).c_str()) + line + "\"");
    }
  }
  // rxe's own CM traffic (tests/data/rxe_cm.pcapng): nothing malformed there either, and
  // Wireshark names each message as our codec does (cm_capture_test.cpp checks the values).
  const std::string rxe = run("tshark -r '" RRDMA_TEST_DATA_DIR "/rxe_cm.pcapng' -V 2>&1");
  for (const char* bad : {"Malformed", "Expert Info", "Dissector bug", "Exception"})
    if (rxe.find(bad) != std::string::npos) failures.push_back(std::string("rxe_cm.pcapng: the decode says \"") + bad + "\"");
  const std::vector<std::string> rxe_frames = split_frames(rxe);
  std::size_t requests = 0, replies = 0, rejects = 0, sidr = 0;
  for (const std::string& f : rxe_frames) {
    requests += f.find("CM ConnectRequest") != std::string::npos ? 1 : 0;
    replies += f.find("CM ConnectReply") != std::string::npos ? 1 : 0;
    rejects += f.find("CM ConnectReject") != std::string::npos ? 1 : 0;
    sidr += f.find("CM ServiceIDResReq") != std::string::npos ? 1 : 0;
  }
  if (rxe_frames.size() != 18 || requests != 5 || replies != 8 || rejects != 2 || sidr != 3)
    failures.push_back(format("rxe_cm.pcapng: %zu frames decoded (18), REQ %zu (5), REP %zu (8), REJ %zu (2), SIDR_REQ %zu (3)",
                              rxe_frames.size(), requests, replies, rejects, sidr));
  if (!failures.empty()) {
    std::cout << decode << "\n";
    for (const std::string& f : failures) std::cout << "FAILED: " << f << "\n";
    return 1;
  }
  std::cout << "ok: tshark decodes " << messages.size() << " CM MADs (" << checked
            << " fields checked, nothing malformed) and rxe's 18 of rxe_cm.pcapng: " << run("tshark --version 2>/dev/null | head -1");
  return 0;
}
