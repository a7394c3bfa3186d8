// The control socket's boundaries, as pure pieces the server composes (and the tests
// drive with time passed in):
//   - who may run which admin command (root everything; members of `up --group` only
//     what reads: status and stats);
//   - how many lines requests may add to the daemon's log (a token bucket);
//   - how a reply larger than one SOCK_SEQPACKET message travels: a header, then chunks
//     the client reassembles, with a bounded total (ReplyAssembler treats every message
//     as hostile).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "stack/time.h"

namespace rrdma::vnic {

// nullopt when `uid` may run the admin command `cmd`; else the sentence that refuses it.
// `owner`: the uid the daemon runs as (an ordinary user's `up --netdev`), who may do what
// root may to the vnic.
std::optional<std::string> refusal_for(std::string_view cmd, uid_t uid, uid_t owner = 0);

// A token bucket: `burst` lines at once, then `per_second` lines a second. What it holds
// back is counted, and the next line it lets through says how many went unsaid.
class LogRateLimiter {
 public:
  LogRateLimiter(unsigned burst, unsigned per_second);

  struct Verdict {
    bool log = false;
    std::uint64_t suppressed_before = 0;  // lines held back since the last one logged
  };
  Verdict admit(Instant now);
  std::uint64_t suppressed_total() const { return suppressed_total_; }

 private:
  double burst_;
  double per_second_;
  double tokens_;
  std::optional<Instant> last_refill_;
  std::uint64_t suppressed_since_logged_ = 0;
  std::uint64_t suppressed_total_ = 0;
};

// A reply of at most kMaxSingleReply bytes is one message, as it always was. A longer one
// is a header {"chunked_reply":{"bytes":N,"chunks":K}} followed by K messages of at most
// kReplyChunkBytes of the JSON text. Each message stays small (the kernel allocates one
// socket buffer per message; a 500 KB message needs a high-order allocation and, at the
// default wmem, fails with EMSGSIZE), and the sender's buffer is raised to hold them all.
inline constexpr std::size_t kMaxSingleReply = 48 * 1024;
inline constexpr std::size_t kReplyChunkBytes = 32 * 1024;
// The largest reply either side accepts: a status of every QP a vnic may have (16384)
// is well below it.
inline constexpr std::size_t kMaxReplyBytes = 64 * 1024 * 1024;

struct ReplyMessages {
  std::vector<std::string> messages;  // in order: one whole reply, or a header and chunks
  std::size_t total_bytes = 0;
};
// Empty `messages` when `text` exceeds kMaxReplyBytes.
ReplyMessages split_reply(const std::string& text, std::size_t chunk_bytes = kReplyChunkBytes);

// The client's side: feed every message of a reply in order until it says Complete.
class ReplyAssembler {
 public:
  enum class Step { NeedMore, Complete, Failed };
  Step feed(std::string_view message);
  // After Complete: the reply object. After Failed: why.
  const nlohmann::json& reply() const { return reply_; }
  const std::string& error() const { return error_; }

 private:
  Step fail(std::string why);
  Step finish(std::string_view text);
  Step start(std::string_view message);

  bool chunked_ = false;
  std::size_t expected_bytes_ = 0;
  std::size_t chunks_left_ = 0;
  std::string text_;
  nlohmann::json reply_;
  std::string error_;
  bool done_ = false;
};

}  // namespace rrdma::vnic
