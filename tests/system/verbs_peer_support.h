// The parts of the verbs system-test program (verbs_peer.cpp) that need no vnic: the
// seeded payload pattern and its byte-for-byte check, how a message is cut into uneven
// scatter/gather pieces, the catalogue of cases, the command line, and the line-based TCP
// side channel the two peers use to swap QP information and keep in step (the kernel's own
// network between the namespaces, as ibv_rc_pingpong does). Unit-tested in
// verbs_peer_support_test.cpp.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

namespace rrdma::systest {

// ---------------------------------------------------------------------------------------
// Payload pattern. Byte i of a message sent with seed s is a pure function of (s, i), so
// the receiver checks what it got without a copy of what was sent, and a piece that landed
// at the wrong offset (a scatter/gather bug) or came from another case's seed is caught.

std::byte pattern_byte(std::uint64_t seed, std::uint64_t offset);
// Fills `out` with the message bytes [offset, offset + out.size()).
void fill_pattern(std::span<std::byte> out, std::uint64_t seed, std::uint64_t offset = 0);
// The index (within `data`) of the first byte that differs from the pattern, if any.
std::optional<std::size_t> first_pattern_mismatch(std::span<const std::byte> data, std::uint64_t seed,
                                                  std::uint64_t offset = 0);
// The index of the first byte that is not `value`, if any: the guard bytes around a buffer
// and the memory an error case must leave untouched.
std::optional<std::size_t> first_byte_not(std::span<const std::byte> data, std::byte value);

// ---------------------------------------------------------------------------------------
// Scatter/gather. A message of `total` bytes cut into at most `pieces` non-empty pieces of
// unequal length (variant picks one of several cuts, so the sender's and the receiver's
// SGE boundaries differ). Fewer pieces when total < pieces; none when total is 0.
std::vector<std::size_t> uneven_split(std::size_t total, std::size_t pieces, unsigned variant);

// ---------------------------------------------------------------------------------------
// The cases. Both peers run the same list in the same order.

enum class Transport { Rc, Uc, Ud };

enum class CaseKind {
  // Data movement, one per verbs operation.
  Send, SendImm, Write, WriteImm, Read, CompareSwap, FetchAdd,
  // Error paths (each checks the exact completion status and that nothing was written).
  WrongRkey, ReadPastEnd, WriteNoRemoteWrite, RecvTooSmall, RnrThenSuccess, RnrRetryExceeded,
};

struct CaseInfo {
  std::string_view name;
  CaseKind kind;
  Transport transport;
  bool sized;           // runs once per size; otherwise once
  std::string_view what;
};

std::span<const CaseInfo> all_cases();
const CaseInfo* find_case(std::string_view name);
// The cases a bare `--case all` / `--case errors` means.
std::vector<const CaseInfo*> data_cases();
std::vector<const CaseInfo*> error_cases();

std::string_view to_string(Transport transport);

// ---------------------------------------------------------------------------------------
// The command line.

inline constexpr std::uint16_t kDefaultPort = 18515;  // ibv_rc_pingpong's default port
inline const std::vector<std::size_t> kDefaultSizes = {0, 1, 4095, 4096, 4097, 65536, 1u << 20, 8u << 20};

enum class Role { Server, Client };

struct Options {
  Role role = Role::Server;
  std::string device;        // the vnic name
  std::string peer_address;  // the server's IPv4 address (client only)
  std::uint16_t port = kDefaultPort;
  std::vector<const CaseInfo*> cases;
  std::vector<std::size_t> sizes = kDefaultSizes;
  std::uint64_t seed = 1;
  std::size_t sges = 3;
  bool hold = false;                    // transfer in a loop until killed (kill -9 test)
  std::chrono::seconds timeout{60};     // per completion / side-channel wait
  // RC ACK timeout exponent (IBA 9.7.6.1.3: 4.096 us * 2^n); unset: the API's default (14).
  std::optional<std::uint8_t> ack_timeout;
  std::string keys_file;                // isolation: where the owner writes its keys
  std::string isolation_role;           // "owner" or "intruder" (with keys_file)
};

// Parses argv[1..]. An error is a one-line message for stderr.
std::variant<Options, std::string> parse_options(std::span<const std::string_view> args);
std::string usage();

// ---------------------------------------------------------------------------------------
// Side channel: one TCP connection carrying lines of `key=value` words.

using Fields = std::map<std::string, std::string, std::less<>>;

std::string format_fields(const Fields& fields);
// Parses `k=v k=v`; nullopt on a word without '=' or an empty key.
std::optional<Fields> parse_fields(std::string_view line);
// A field as an unsigned number (decimal or 0x hex); nullopt when missing or malformed.
std::optional<std::uint64_t> field_number(const Fields& fields, std::string_view key);

class SideChannel {
 public:
  // Server: listens on `port` (all addresses) and accepts one peer within `timeout`.
  static SideChannel accept_one(std::uint16_t port, std::chrono::milliseconds timeout);
  // Client: connects to address:port, retrying until `timeout` (the server may start later).
  static SideChannel connect_to(const std::string& address, std::uint16_t port,
                                std::chrono::milliseconds timeout);
  static SideChannel from_fd(int fd);  // takes ownership (tests: one end of a socketpair)

  SideChannel(SideChannel&& other) noexcept;
  SideChannel& operator=(SideChannel&& other) noexcept;
  SideChannel(const SideChannel&) = delete;
  SideChannel& operator=(const SideChannel&) = delete;
  ~SideChannel();

  void send_line(std::string_view line);
  // The next line (without '\n'); throws on EOF, on a line over 64 KiB and on timeout.
  std::string receive_line(std::chrono::milliseconds timeout);
  void send(const Fields& fields) { send_line(format_fields(fields)); }
  Fields receive(std::chrono::milliseconds timeout);
  // Receives a line and checks that its "step" field is `step` (keeps the peers in step,
  // and turns the peer's "step=abort reason=..." into an exception with its reason).
  Fields expect(std::string_view step, std::chrono::milliseconds timeout);

 private:
  explicit SideChannel(int fd) : fd_(fd) {}
  int fd_ = -1;
  std::string buffer_;
};

}  // namespace rrdma::systest
