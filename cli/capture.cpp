#include "cli/capture.h"

#include <pcap/pcap.h>

#include <cstdio>
#include <iostream>

#include "cli/stream.h"
#include "vnic/capture.h"

namespace rrdma::cli {
namespace {

constexpr const char* kCaptureFooter = R"(Examples:
  rrdma-vnic capture rv0 -w rv0.pcap              # until Ctrl-C
  rrdma-vnic capture rv0 -w rv0.pcap --count 100
  rrdma-vnic capture rv0 -w - | tshark -r - -V     # a live decode
  tshark -r rv0.pcap -d udp.port==4791,rroce      # RoCE v2 on other ports too
The file is classic pcap (libpcap's dump API writes no pcapng) with nanosecond time
stamps, link type Ethernet. When the reader falls behind, the daemon drops frames rather
than slow the NIC down, and says how many at the end.)";

// libpcap's writer: pcap_open_dead + pcap_dump_open. Nanosecond stamps because frames of
// one burst are often less than a microsecond apart.
class PcapWriter {
 public:
  explicit PcapWriter(const std::string& file) {
    dead_ = pcap_open_dead_with_tstamp_precision(DLT_EN10MB, static_cast<int>(vnic::kCaptureMaxFrame),
                                                 PCAP_TSTAMP_PRECISION_NANO);
    if (dead_ == nullptr) {
      error_ = "pcap_open_dead failed";
      return;
    }
    dumper_ = pcap_dump_open(dead_, file.c_str());
    if (dumper_ == nullptr) error_ = std::string("cannot write ") + file + ": " + pcap_geterr(dead_);
  }
  ~PcapWriter() { close(); }
  PcapWriter(const PcapWriter&) = delete;
  PcapWriter& operator=(const PcapWriter&) = delete;

  const std::string& error() const { return error_; }

  void write(const vnic::CaptureRecord& record) {
    pcap_pkthdr header{};
    header.ts.tv_sec = static_cast<time_t>(record.realtime_ns / 1'000'000'000u);
    header.ts.tv_usec = static_cast<suseconds_t>(record.realtime_ns % 1'000'000'000u);  // ns: see above
    header.caplen = static_cast<bpf_u_int32>(record.frame.size());
    header.len = header.caplen;
    pcap_dump(reinterpret_cast<u_char*>(dumper_), &header, record.frame.data());
    ++written_;
  }
  std::uint64_t written() const { return written_; }
  bool close() {
    bool ok = true;
    if (dumper_ != nullptr) {
      ok = pcap_dump_flush(dumper_) == 0;
      pcap_dump_close(dumper_);
      dumper_ = nullptr;
    }
    if (dead_ != nullptr) pcap_close(dead_);
    dead_ = nullptr;
    return ok;
  }

 private:
  pcap_t* dead_ = nullptr;
  pcap_dumper_t* dumper_ = nullptr;
  std::string error_;
  std::uint64_t written_ = 0;
};

std::uint64_t field(const nlohmann::json& summary, const char* name) {
  const auto it = summary.find(name);
  return it != summary.end() && it->is_number_unsigned() ? it->get<std::uint64_t>() : 0;
}

}  // namespace

void add_capture_command(CLI::App& app, CaptureCommand& command) {
  command.app = app.add_subcommand("capture", "Write every frame the vnic sends and receives to a pcap file");
  command.app->footer(kCaptureFooter);
  command.app->add_option("name", command.vnic, "The vnic's name")->required();
  command.app->add_option("-w,--write", command.file, "The file to write (- for stdout)")->required();
  command.app->add_option("--count", command.count, "Stop after this many frames (default: until Ctrl-C)");
}

int run_capture(const CaptureCommand& command) {
  PcapWriter writer(command.file);
  if (!writer.error().empty()) {
    std::cerr << "rrdma-vnic: " << writer.error() << "\n";
    return 1;
  }
  std::uint64_t malformed = 0;
  std::uint64_t beyond_count = 0;
  const auto result = run_stream(
      command.vnic, {{"cmd", "capture"}},
      [&](const nlohmann::json&) {
        std::cerr << "rrdma-vnic: capturing on " << command.vnic << " into " << command.file
                  << " (Ctrl-C stops)" << std::endl;
      },
      [&](std::span<const std::uint8_t> message) {
        const auto record = vnic::parse_capture_record(message);
        if (!record) {
          ++malformed;
          return StreamStep::Continue;
        }
        if (command.count != 0 && writer.written() >= command.count) {
          ++beyond_count;  // already queued when we asked the daemon to stop
          return StreamStep::Stop;
        }
        writer.write(*record);
        return command.count != 0 && writer.written() >= command.count ? StreamStep::Stop : StreamStep::Continue;
      });
  const bool flushed = writer.close();
  if (!result.start) {
    std::cerr << "rrdma-vnic: " << result.error << "\n";
    return 1;
  }
  std::cerr << "rrdma-vnic: " << writer.written() << " frames written to " << command.file << "\n";
  // One machine-readable line: the file against the daemon's own counts for the window.
  const nlohmann::json summary = result.summary.value_or(nlohmann::json::object());
  std::FILE* out = command.file == "-" ? stderr : stdout;  // never into the pcap stream
  std::fprintf(out, "frames_written=%llu frames_forwarded=%llu frames_dropped=%llu nic_received=%llu nic_sent=%llu "
              "not_written=%llu malformed=%llu\n",
              static_cast<unsigned long long>(writer.written()),
              static_cast<unsigned long long>(field(summary, "frames_forwarded")),
              static_cast<unsigned long long>(field(summary, "frames_dropped")),
              static_cast<unsigned long long>(field(summary, "nic_received")),
              static_cast<unsigned long long>(field(summary, "nic_sent")),
              static_cast<unsigned long long>(beyond_count), static_cast<unsigned long long>(malformed));
  if (field(summary, "frames_dropped") != 0) {
    std::cerr << "rrdma-vnic: the daemon dropped " << field(summary, "frames_dropped")
              << " frames: the reader fell behind\n";
  }
  if (!result.summary) {
    std::cerr << "rrdma-vnic: the capture ended without the daemon's summary"
              << (result.error.empty() ? "" : ": " + result.error) << "\n";
    return 1;
  }
  if (!flushed || malformed != 0) {
    std::cerr << "rrdma-vnic: " << (flushed ? std::to_string(malformed) + " malformed records" : "cannot flush " + command.file)
              << "\n";
    return 1;
  }
  return 0;
}

}  // namespace rrdma::cli
