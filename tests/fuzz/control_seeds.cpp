// Writes the seed corpora of the control-socket fuzz targets (tests/fuzz/run-fuzz.sh):
//   DIR/control_frame/   every request and reply type as a well-formed frame, prefixed by
//                        its fd count (the target's input format)
//   DIR/nic_requests/    scripts that open a device, allocate a PD, register an MR, create a
//                        CQ, an SRQ, QPs and an AH, modify and query, then destroy, in the
//                        byte format of nic_requests_properties.h
//   DIR/admin_json/      the requests the CLI sends, and trace filters
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "verbs/contract/control_protocol.h"

namespace {

namespace control = rrdma::verbs::control;

void write_file(const std::string& path, const std::vector<std::uint8_t>& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
}

void frames(const std::string& dir) {
  for (std::uint16_t t = 1; t <= control::kMessageTypeCount; ++t) {
    const auto type = static_cast<control::MessageType>(t);
    for (const bool reply : {false, true}) {
      control::Message message = reply ? control::make_reply(type, 7, 0) : control::make_request(type, 7);
      for (std::size_t i = 0; i < message.words.size(); ++i) message.words[i] = i + 1;
      std::vector<std::uint8_t> bytes(1 + message.length());
      bytes[0] = static_cast<std::uint8_t>(control::shape_of(message.wire_type)->fds);
      control::emit(message, rrdma::MutableByteSpan(bytes.data() + 1, bytes.size() - 1));
      write_file(dir + "/" + control::message_name(type) + (reply ? "_reply" : "") + ".bin", bytes);
    }
  }
}

// One request of a script: its type byte, then per word its selector bytes (0x40 | v: the
// small value v; 0x80 | i: word i of the earlier replies; 0x00 and 8 bytes: a raw value), then
// per fd 0 (what the request needs).
using Word = std::vector<std::uint8_t>;
struct Step {
  control::MessageType type;
  std::vector<Word> words;
  std::size_t fds = 0;
};

Word small(std::uint8_t v) { return {static_cast<std::uint8_t>(0x40 | v)}; }
Word earlier(std::uint8_t i) { return {static_cast<std::uint8_t>(0x80 | i)}; }
Word raw(std::uint64_t v) {
  Word w{0};
  for (int shift = 56; shift >= 0; shift -= 8) w.push_back(static_cast<std::uint8_t>(v >> shift));
  return w;
}

void scripts(const std::string& dir) {
  using control::MessageType;
  // The earlier replies' words, in order (word 0 is seen[0] = 0): 1 context, 2 node GUID,
  // 3 PD, 4 MR handle, 5 L_Key, 6 R_Key, 7 memory window handle, 8 its R_Key, 9 CQ, 10 SRQ,
  // 11 QP, 12 QPN, 13 AH; the queries come after, so that their many words do not move these.
  const Word peer_gid_low = raw(0x0000FFFF0A420002);  // ::ffff:10.66.0.2
  const std::vector<Step> full = {
      {MessageType::OpenDevice, {small(control::kVersion), small(0)}, 3},
      {MessageType::AllocPd, {earlier(1)}},
      // REMOTE_READ only: a region granting a write must lie in writable memory of the client
      // (issue 27 item 5), which address 16 of the fuzzing process is not.
      {MessageType::RegMr, {earlier(3), small(16), small(32), small(4), small(16)}},
      {MessageType::AllocMw, {earlier(3), small(2)}},
      {MessageType::CreateCq, {earlier(1), small(16), small(0)}, 2},
      {MessageType::CreateSrq, {earlier(3), small(16), small(2), small(4), small(0)}, 2},
      {MessageType::CreateQp, {earlier(3), small(2), earlier(9), earlier(9), small(0), small(16), small(16), small(2),
                               small(2), small(32), small(0), small(0)}, 3},
      {MessageType::CreateAh, {earlier(3), small(0), peer_gid_low, small(0), small(1), small(0), small(0), small(1)}},
      {MessageType::ResizeCq, {earlier(9), small(32), small(0)}, 1},
      {MessageType::ModifyQp, {earlier(11), small(1), small(1)}},  // to INIT without port, P_Key, access: refused
      {MessageType::QueryQp, {earlier(11), small(1)}},
      {MessageType::QueryDevice, {earlier(1)}},
      {MessageType::QueryPort, {earlier(1), small(1)}},
      {MessageType::QueryGid, {earlier(1), small(1), small(0)}},
      {MessageType::DestroyQp, {earlier(11)}},
      {MessageType::DestroySrq, {earlier(10)}},
      {MessageType::DeallocMw, {earlier(7)}},
      {MessageType::DeregMr, {earlier(4)}},
      {MessageType::DestroyCq, {earlier(9)}},
      {MessageType::DestroyAh, {earlier(13)}},
      {MessageType::DeallocPd, {earlier(3)}},
  };
  std::vector<std::uint8_t> bytes;
  for (std::size_t n = 0; n < full.size(); ++n) {
    const Step& step = full[n];
    bytes.push_back(static_cast<std::uint8_t>(static_cast<std::uint16_t>(step.type) - 1));
    const std::size_t count = control::shape_of(control::request_type(step.type))->words;
    for (std::size_t i = 0; i < count; ++i) {
      const Word word = i < step.words.size() ? step.words[i] : small(0);
      bytes.insert(bytes.end(), word.begin(), word.end());
    }
    bytes.insert(bytes.end(), step.fds, 0);
    write_file(dir + "/script_" + std::to_string(n + 1) + ".bin", bytes);
  }
}

void admin(const std::string& dir) {
  const std::vector<std::string> requests = {
      R"({"cmd":"status"})", R"({"cmd":"stats"})", R"({"cmd":"down"})", R"({"cmd":"capture"})",
      R"({"cmd":"trace"})", R"({"cmd":"trace","qp":17,"layers":["roce","qp"]})",
      R"({"cmd":"trace","layers":["eth","arp","ip","udp","roce","qp","verbs"]})", R"({"cmd":"nope"})",
      R"({"cmd":"trace","qp":16777215})", R"({"cmd":1})", R"([1,2,3])"};
  // Deep nesting (8000 levels: a fourth of what a 64 KiB request allows, so that mutating it
  // stays quick), and a command of escapes to echo back.
  std::vector<std::string> all = requests;
  all.push_back(R"({"cmd":"stats","x":)" + std::string(8000, '[') + std::string(8000, ']') + "}");
  all.push_back(R"({"cmd":"\u0000\u001f\ud83d\ude00\"'\\"})");
  for (std::size_t n = 0; n < all.size(); ++n) {
    write_file(dir + "/request_" + std::to_string(n + 1) + ".json", std::vector<std::uint8_t>(all[n].begin(), all[n].end()));
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s DIR (writes DIR/control_frame, DIR/nic_requests, DIR/admin_json)\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1];
  for (const char* sub : {"/control_frame", "/nic_requests", "/admin_json"}) std::filesystem::create_directories(dir + sub);
  frames(dir + "/control_frame");
  scripts(dir + "/nic_requests");
  admin(dir + "/admin_json");
  return 0;
}
