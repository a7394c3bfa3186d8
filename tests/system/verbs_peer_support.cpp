#include "tests/system/verbs_peer_support.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace rrdma::systest {

// ---------------------------------------------------------------------------------------
// Pattern

namespace {

// SplitMix64 (Steele, Lea, Flood 2014): a cheap, well-mixed 64-bit function, so that
// neighbouring words of one message and the same word of two seeds look unrelated.
std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

std::uint64_t pattern_word(std::uint64_t seed, std::uint64_t word_index) {
  return mix64(mix64(seed) ^ word_index);
}

}  // namespace

std::byte pattern_byte(std::uint64_t seed, std::uint64_t offset) {
  const std::uint64_t word = pattern_word(seed, offset / 8);
  return static_cast<std::byte>(word >> (8 * (offset % 8)));
}

void fill_pattern(std::span<std::byte> out, std::uint64_t seed, std::uint64_t offset) {
  std::size_t i = 0;
  while (i < out.size()) {
    const std::uint64_t at = offset + i;
    const std::uint64_t word = pattern_word(seed, at / 8);
    for (std::uint64_t b = at % 8; b < 8 && i < out.size(); ++b, ++i) {
      out[i] = static_cast<std::byte>(word >> (8 * b));
    }
  }
}

std::optional<std::size_t> first_pattern_mismatch(std::span<const std::byte> data, std::uint64_t seed,
                                                  std::uint64_t offset) {
  std::size_t i = 0;
  while (i < data.size()) {
    const std::uint64_t at = offset + i;
    const std::uint64_t word = pattern_word(seed, at / 8);
    for (std::uint64_t b = at % 8; b < 8 && i < data.size(); ++b, ++i) {
      if (data[i] != static_cast<std::byte>(word >> (8 * b))) return i;
    }
  }
  return std::nullopt;
}

std::optional<std::size_t> first_byte_not(std::span<const std::byte> data, std::byte value) {
  const auto it = std::find_if(data.begin(), data.end(), [value](std::byte b) { return b != value; });
  if (it == data.end()) return std::nullopt;
  return static_cast<std::size_t>(it - data.begin());
}

// ---------------------------------------------------------------------------------------
// Scatter/gather

std::vector<std::size_t> uneven_split(std::size_t total, std::size_t pieces, unsigned variant) {
  std::vector<std::size_t> out;
  if (total == 0 || pieces == 0) return out;
  pieces = std::min(pieces, total);
  // Weights 1, 2, 3... rotated by `variant`: piece k gets about weight_k / sum of the rest,
  // so no two neighbouring pieces have the same length and the cuts fall at odd offsets.
  std::vector<std::size_t> weights(pieces);
  for (std::size_t k = 0; k < pieces; ++k) weights[k] = 1 + (k + variant) % pieces;
  std::size_t weight_sum = 0;
  for (std::size_t w : weights) weight_sum += w;
  std::size_t left = total;
  for (std::size_t k = 0; k + 1 < pieces; ++k) {
    // At least 1 byte for this piece and for each piece after it.
    std::size_t length = std::max<std::size_t>(1, total / weight_sum * weights[k] + (weights[k] % 2));
    length = std::min(length, left - (pieces - 1 - k));
    out.push_back(length);
    left -= length;
  }
  out.push_back(left);
  return out;
}

// ---------------------------------------------------------------------------------------
// Cases

namespace {

constexpr CaseInfo kCases[] = {
    {"rc_send", CaseKind::Send, Transport::Rc, true, "RC SEND/RECV, gather and scatter over 3 MRs"},
    {"rc_send_imm", CaseKind::SendImm, Transport::Rc, true, "RC SEND with immediate"},
    {"rc_write", CaseKind::Write, Transport::Rc, true, "RC RDMA WRITE while the target only waits"},
    {"rc_write_imm", CaseKind::WriteImm, Transport::Rc, true, "RC RDMA WRITE with immediate"},
    {"rc_read", CaseKind::Read, Transport::Rc, true, "RC RDMA READ, scattered over 3 MRs"},
    {"rc_compare_swap", CaseKind::CompareSwap, Transport::Rc, false, "RC atomic compare and swap"},
    {"rc_fetch_add", CaseKind::FetchAdd, Transport::Rc, false, "RC atomic fetch and add"},
    {"uc_send", CaseKind::Send, Transport::Uc, true, "UC SEND/RECV"},
    {"uc_write", CaseKind::Write, Transport::Uc, true, "UC RDMA WRITE"},
    {"ud_send", CaseKind::Send, Transport::Ud, true, "UD SEND (sizes up to the path MTU)"},
    {"wrong_rkey", CaseKind::WrongRkey, Transport::Rc, false, "WRITE with a wrong R_Key: REM_ACCESS_ERR, nothing written"},
    {"read_past_end", CaseKind::ReadPastEnd, Transport::Rc, false, "READ past the MR's end: REM_ACCESS_ERR"},
    {"write_no_remote_write", CaseKind::WriteNoRemoteWrite, Transport::Rc, false,
     "WRITE to an MR without REMOTE_WRITE: REM_ACCESS_ERR, nothing written"},
    {"recv_too_small", CaseKind::RecvTooSmall, Transport::Rc, false, "SEND into a smaller RECV: LOC_LEN_ERR at the receiver"},
    {"rnr_then_success", CaseKind::RnrThenSuccess, Transport::Rc, false,
     "SEND before the RECV is posted: RNR NAKs, then success once it is"},
    {"rnr_retry_exceeded", CaseKind::RnrRetryExceeded, Transport::Rc, false,
     "SEND with no RECV ever posted, rnr_retry 1: RNR_RETRY_EXC_ERR, nothing written"},
};

bool is_error_kind(CaseKind kind) {
  switch (kind) {
    case CaseKind::WrongRkey:
    case CaseKind::ReadPastEnd:
    case CaseKind::WriteNoRemoteWrite:
    case CaseKind::RecvTooSmall:
    case CaseKind::RnrThenSuccess:
    case CaseKind::RnrRetryExceeded:
      return true;
    default:
      return false;
  }
}

}  // namespace

std::span<const CaseInfo> all_cases() { return kCases; }

const CaseInfo* find_case(std::string_view name) {
  for (const CaseInfo& info : kCases) {
    if (info.name == name) return &info;
  }
  return nullptr;
}

std::vector<const CaseInfo*> data_cases() {
  std::vector<const CaseInfo*> out;
  for (const CaseInfo& info : kCases) {
    if (!is_error_kind(info.kind)) out.push_back(&info);
  }
  return out;
}

std::vector<const CaseInfo*> error_cases() {
  std::vector<const CaseInfo*> out;
  for (const CaseInfo& info : kCases) {
    if (is_error_kind(info.kind)) out.push_back(&info);
  }
  return out;
}

std::string_view to_string(Transport transport) {
  switch (transport) {
    case Transport::Rc: return "RC";
    case Transport::Uc: return "UC";
    case Transport::Ud: return "UD";
  }
  return "?";
}

// ---------------------------------------------------------------------------------------
// Command line

namespace {

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> out;
  while (true) {
    const std::size_t at = text.find(separator);
    out.push_back(text.substr(0, at));
    if (at == std::string_view::npos) return out;
    text.remove_prefix(at + 1);
  }
}

// A size: digits with an optional K or M suffix (powers of 1024).
std::optional<std::size_t> parse_size(std::string_view text) {
  std::size_t scale = 1;
  if (!text.empty() && (text.back() == 'K' || text.back() == 'M')) {
    scale = text.back() == 'K' ? 1024 : 1024 * 1024;
    text.remove_suffix(1);
  }
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  if (value > (std::uint64_t{1} << 31) / scale) return std::nullopt;  // a message is < 2 GiB
  return static_cast<std::size_t>(value * scale);
}

std::optional<std::uint64_t> parse_number(std::string_view text) {
  int base = 10;
  if (text.starts_with("0x")) {
    base = 16;
    text.remove_prefix(2);
  }
  std::uint64_t value = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value, base);
  if (text.empty() || ec != std::errc{} || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<std::string> add_cases(Options& options, std::string_view list) {
  for (std::string_view name : split(list, ',')) {
    if (name == "all" || name == "data") {
      for (const CaseInfo* info : data_cases()) options.cases.push_back(info);
    } else if (name == "errors") {
      for (const CaseInfo* info : error_cases()) options.cases.push_back(info);
    } else if (const CaseInfo* info = find_case(name)) {
      options.cases.push_back(info);
    } else {
      return "unknown case '" + std::string(name) + "' (see --list)";
    }
  }
  return std::nullopt;
}

std::optional<std::string> set_sizes(Options& options, std::string_view list) {
  options.sizes.clear();
  for (std::string_view word : split(list, ',')) {
    const auto size = parse_size(word);
    if (!size) return "bad size '" + std::string(word) + "' (bytes, or with K / M; below 2 GiB)";
    options.sizes.push_back(*size);
  }
  return std::nullopt;
}

}  // namespace

std::string usage() {
  std::string out =
      "usage: rrdma_verbs_peer --dev VNIC (--server | --connect IP) [--port N] [--case LIST]\n"
      "                        [--sizes LIST] [--seed N] [--sges N] [--timeout SECONDS] [--hold]\n"
      "                        [--ack-timeout N]\n"
      "                        [--isolation owner|intruder --keys-file FILE] [--list]\n"
      "  both peers run the same --case list (comma-separated; 'all' = every data case,\n"
      "  'errors' = every error case) and print one line per case: NAME SIZE RESULT\n"
      "cases:\n";
  for (const CaseInfo& info : kCases) {
    out += "  " + std::string(info.name) + std::string(24 - std::min<std::size_t>(info.name.size(), 22), ' ') +
           std::string(info.what) + "\n";
  }
  return out;
}

std::variant<Options, std::string> parse_options(std::span<const std::string_view> args) {
  Options options;
  bool role_given = false;
  bool cases_given = false;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string_view arg = args[i];
    auto value = [&]() -> std::optional<std::string_view> {
      if (i + 1 >= args.size()) return std::nullopt;
      return args[++i];
    };
    auto missing = [&] { return std::string(arg) + " needs a value"; };
    if (arg == "--server") {
      if (role_given) return std::string("give one of --server and --connect");
      options.role = Role::Server;
      role_given = true;
    } else if (arg == "--connect") {
      if (role_given) return std::string("give one of --server and --connect");
      const auto v = value();
      if (!v) return missing();
      in_addr probe{};
      if (inet_pton(AF_INET, std::string(*v).c_str(), &probe) != 1) {
        return "--connect wants an IPv4 address, not '" + std::string(*v) + "'";
      }
      options.role = Role::Client;
      options.peer_address = std::string(*v);
      role_given = true;
    } else if (arg == "--dev") {
      const auto v = value();
      if (!v || v->empty()) return missing();
      options.device = std::string(*v);
    } else if (arg == "--port") {
      const auto v = value();
      if (!v) return missing();
      const auto n = parse_number(*v);
      if (!n || *n == 0 || *n > 65535) return "bad port '" + std::string(*v) + "'";
      options.port = static_cast<std::uint16_t>(*n);
    } else if (arg == "--case") {
      const auto v = value();
      if (!v) return missing();
      if (auto error = add_cases(options, *v)) return *error;
      cases_given = true;
    } else if (arg == "--sizes") {
      const auto v = value();
      if (!v) return missing();
      if (auto error = set_sizes(options, *v)) return *error;
    } else if (arg == "--seed") {
      const auto v = value();
      const auto n = v ? parse_number(*v) : std::nullopt;
      if (!n) return std::string("--seed wants a number");
      options.seed = *n;
    } else if (arg == "--sges") {
      const auto v = value();
      const auto n = v ? parse_number(*v) : std::nullopt;
      if (!n || *n < 1 || *n > 16) return std::string("--sges wants 1..16");
      options.sges = static_cast<std::size_t>(*n);
    } else if (arg == "--timeout") {
      const auto v = value();
      const auto n = v ? parse_number(*v) : std::nullopt;
      if (!n || *n < 1 || *n > 3600) return std::string("--timeout wants 1..3600 seconds");
      options.timeout = std::chrono::seconds(*n);
    } else if (arg == "--ack-timeout") {
      const auto v = value();
      const auto n = v ? parse_number(*v) : std::nullopt;
      if (!n || *n < 1 || *n > 31) return std::string("--ack-timeout wants 1..31 (4.096 us * 2^n)");
      options.ack_timeout = static_cast<std::uint8_t>(*n);
    } else if (arg == "--hold") {
      options.hold = true;
    } else if (arg == "--keys-file") {
      const auto v = value();
      if (!v || v->empty()) return missing();
      options.keys_file = std::string(*v);
    } else if (arg == "--isolation") {
      const auto v = value();
      if (!v || (*v != "owner" && *v != "intruder")) return std::string("--isolation wants owner or intruder");
      options.isolation_role = std::string(*v);
    } else {
      return "unknown argument '" + std::string(arg) + "'";
    }
  }
  if (!role_given) return std::string("give --server or --connect IP");
  if (options.device.empty()) return std::string("give --dev VNIC");
  if (options.isolation_role.empty() != options.keys_file.empty()) {
    return std::string("--isolation and --keys-file go together");
  }
  const bool special = options.hold || !options.isolation_role.empty();
  if (special && cases_given) return std::string("--hold and --isolation run their own exchange: no --case");
  if (!special && !cases_given) return std::string("give --case LIST (or --hold, or --isolation)");
  if (options.sizes.empty()) return std::string("--sizes is empty");
  return options;
}

// ---------------------------------------------------------------------------------------
// Side channel

std::string format_fields(const Fields& fields) {
  std::string out;
  for (const auto& [key, value] : fields) {
    if (!out.empty()) out += ' ';
    out += key;
    out += '=';
    // Words are separated by spaces and lines by newlines: a value (an error message)
    // keeps its words joined by '_'.
    for (char c : value) out += (c == ' ' || c == '\n' || c == '\r' || c == '\t') ? '_' : c;
  }
  return out;
}

std::optional<Fields> parse_fields(std::string_view line) {
  Fields out;
  for (std::string_view word : split(line, ' ')) {
    if (word.empty()) continue;
    const std::size_t eq = word.find('=');
    if (eq == std::string_view::npos || eq == 0) return std::nullopt;
    out.insert_or_assign(std::string(word.substr(0, eq)), std::string(word.substr(eq + 1)));
  }
  return out;
}

std::optional<std::uint64_t> field_number(const Fields& fields, std::string_view key) {
  const auto it = fields.find(key);
  if (it == fields.end()) return std::nullopt;
  return parse_number(it->second);
}

namespace {

[[noreturn]] void throw_errno(const std::string& what) {
  throw std::runtime_error(what + ": " + std::strerror(errno));
}

int remaining_ms(std::chrono::steady_clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
  return static_cast<int>(std::clamp<std::int64_t>(left.count(), 0, 1 << 30));
}

void wait_readable(int fd, std::chrono::steady_clock::time_point deadline, const char* what) {
  while (true) {
    pollfd p{fd, POLLIN, 0};
    const int n = ::poll(&p, 1, remaining_ms(deadline));
    if (n > 0) return;
    if (n == 0) throw std::runtime_error(std::string("timed out waiting for ") + what);
    if (errno != EINTR) throw_errno("poll");
  }
}

}  // namespace

SideChannel SideChannel::accept_one(std::uint16_t port, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  const int listener = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listener < 0) throw_errno("socket");
  const int one = 1;
  ::setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_ANY);
  if (::bind(listener, reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0 || ::listen(listener, 1) != 0) {
    const int saved = errno;
    ::close(listener);
    errno = saved;
    throw_errno("listen on port " + std::to_string(port));
  }
  try {
    wait_readable(listener, deadline, "the peer to connect");
  } catch (...) {
    ::close(listener);
    throw;
  }
  const int fd = ::accept4(listener, nullptr, nullptr, SOCK_CLOEXEC);
  const int saved = errno;
  ::close(listener);
  errno = saved;
  if (fd < 0) throw_errno("accept");
  ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return SideChannel(fd);
}

SideChannel SideChannel::connect_to(const std::string& address, std::uint16_t port, std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  sockaddr_in peer{};
  peer.sin_family = AF_INET;
  peer.sin_port = htons(port);
  if (inet_pton(AF_INET, address.c_str(), &peer.sin_addr) != 1) {
    throw std::runtime_error("not an IPv4 address: " + address);
  }
  while (true) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw_errno("socket");
    if (::connect(fd, reinterpret_cast<const sockaddr*>(&peer), sizeof peer) == 0) {
      const int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return SideChannel(fd);
    }
    const int saved = errno;
    ::close(fd);
    // The server may not listen yet; anything else is final.
    if (saved != ECONNREFUSED && saved != ENETUNREACH && saved != EHOSTUNREACH && saved != ETIMEDOUT) {
      errno = saved;
      throw_errno("connect to " + address + ":" + std::to_string(port));
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      errno = saved;
      throw_errno("connect to " + address + ":" + std::to_string(port) + " (gave up)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

SideChannel SideChannel::from_fd(int fd) { return SideChannel(fd); }

SideChannel::SideChannel(SideChannel&& other) noexcept : fd_(other.fd_), buffer_(std::move(other.buffer_)) {
  other.fd_ = -1;
}

SideChannel& SideChannel::operator=(SideChannel&& other) noexcept {
  if (this != &other) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = other.fd_;
    buffer_ = std::move(other.buffer_);
    other.fd_ = -1;
  }
  return *this;
}

SideChannel::~SideChannel() {
  if (fd_ >= 0) ::close(fd_);
}

void SideChannel::send_line(std::string_view line) {
  std::string out(line);
  out += '\n';
  std::size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t n = ::send(fd_, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("send to the peer");
    }
    sent += static_cast<std::size_t>(n);
  }
}

std::string SideChannel::receive_line(std::chrono::milliseconds timeout) {
  constexpr std::size_t kMaxLine = 64 * 1024;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    const std::size_t newline = buffer_.find('\n');
    if (newline != std::string::npos) {
      std::string line = buffer_.substr(0, newline);
      buffer_.erase(0, newline + 1);
      return line;
    }
    if (buffer_.size() > kMaxLine) throw std::runtime_error("the peer sent a line over 64 KiB");
    wait_readable(fd_, deadline, "the peer");
    char chunk[4096];
    const ssize_t n = ::recv(fd_, chunk, sizeof chunk, 0);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_errno("receive from the peer");
    }
    if (n == 0) throw std::runtime_error("the peer closed the side channel");
    buffer_.append(chunk, static_cast<std::size_t>(n));
  }
}

Fields SideChannel::receive(std::chrono::milliseconds timeout) {
  const std::string line = receive_line(timeout);
  auto fields = parse_fields(line);
  if (!fields) throw std::runtime_error("malformed line from the peer: '" + line.substr(0, 200) + "'");
  return std::move(*fields);
}

Fields SideChannel::expect(std::string_view step, std::chrono::milliseconds timeout) {
  Fields fields = receive(timeout);
  const auto it = fields.find("step");
  const std::string got = it == fields.end() ? "" : it->second;
  if (got == "abort") {
    const auto reason = fields.find("reason");
    throw std::runtime_error("the peer gave up: " + (reason == fields.end() ? std::string("?") : reason->second));
  }
  if (got != step) {
    throw std::runtime_error("out of step: expected '" + std::string(step) + "' from the peer, got '" + got + "'");
  }
  return fields;
}

}  // namespace rrdma::systest
