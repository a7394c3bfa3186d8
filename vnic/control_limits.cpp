#include "vnic/control_limits.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <utility>

namespace rrdma::vnic {
namespace {

// What a member of the vnic's group may ask besides using the NIC itself (verbs frames):
// read its state. Stopping it, or seeing every frame and event of other users' traffic
// (capture, trace), is root's.
constexpr std::array<std::string_view, 2> kMemberCommands = {"status", "stats"};

std::string what_only_root_may(std::string_view cmd) {
  if (cmd == "down") return "stop a vnic (down)";
  if (cmd == "capture") return "capture a vnic's frames";
  if (cmd == "trace") return "trace a vnic";
  return "send '" + std::string(cmd.substr(0, 40)) + "'";
}

std::optional<std::size_t> unsigned_field(const nlohmann::json& object, const char* key) {
  const auto it = object.find(key);
  if (it == object.end() || !it->is_number_unsigned()) return std::nullopt;
  return it->get<std::size_t>();
}

}  // namespace

std::optional<std::string> refusal_for(std::string_view cmd, uid_t uid, uid_t owner) {
  if (uid == 0 || uid == owner) return std::nullopt;
  if (std::find(kMemberCommands.begin(), kMemberCommands.end(), cmd) != kMemberCommands.end()) {
    return std::nullopt;
  }
  const std::string who = owner == 0 ? "root" : "root and uid " + std::to_string(owner) + " (the vnic's owner)";
  return "only " + who + " may " + what_only_root_may(cmd) + "; uid " + std::to_string(uid) +
         " may use the NIC and read its status and stats";
}

LogRateLimiter::LogRateLimiter(unsigned burst, unsigned per_second)
    : burst_(burst), per_second_(per_second), tokens_(burst) {}

LogRateLimiter::Verdict LogRateLimiter::admit(Instant now) {
  if (last_refill_ && now > *last_refill_) {
    const double seconds = std::chrono::duration<double>(now - *last_refill_).count();
    tokens_ = std::min(burst_, tokens_ + seconds * per_second_);
  }
  if (!last_refill_ || now > *last_refill_) last_refill_ = now;
  if (tokens_ < 1.0) {
    ++suppressed_since_logged_;
    ++suppressed_total_;
    return {};
  }
  tokens_ -= 1.0;
  return {true, std::exchange(suppressed_since_logged_, 0)};
}

ReplyMessages split_reply(const std::string& text, std::size_t chunk_bytes) {
  ReplyMessages out;
  out.total_bytes = text.size();
  if (text.size() > kMaxReplyBytes || chunk_bytes == 0) return out;
  if (text.size() <= kMaxSingleReply) {
    out.messages.push_back(text);
    return out;
  }
  const std::size_t chunks = (text.size() + chunk_bytes - 1) / chunk_bytes;
  out.messages.reserve(chunks + 1);
  out.messages.push_back(nlohmann::json{{"chunked_reply", {{"bytes", text.size()}, {"chunks", chunks}}}}.dump());
  for (std::size_t offset = 0; offset < text.size(); offset += chunk_bytes) {
    out.messages.push_back(text.substr(offset, chunk_bytes));
  }
  return out;
}

ReplyAssembler::Step ReplyAssembler::fail(std::string why) {
  error_ = std::move(why);
  done_ = true;
  text_.clear();
  return Step::Failed;
}

ReplyAssembler::Step ReplyAssembler::finish(std::string_view text) {
  auto reply = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (reply.is_discarded() || !reply.is_object()) return fail("the daemon's reply is not a JSON object");
  reply_ = std::move(reply);
  done_ = true;
  text_.clear();
  return Step::Complete;
}

// The first message: a whole reply, or the header of a chunked one. The header's numbers
// must agree with each other (a chunk is never empty, never longer than kReplyChunkBytes)
// so that a lying header cannot make the client wait for, or buffer, more than it bounds.
ReplyAssembler::Step ReplyAssembler::start(std::string_view message) {
  const auto value = nlohmann::json::parse(message, nullptr, /*allow_exceptions=*/false);
  const auto header = value.is_object() ? value.find("chunked_reply") : value.end();
  if (!value.is_object() || header == value.end()) return finish(message);
  if (!header->is_object()) return fail("a chunked reply's header is malformed");
  const auto bytes = unsigned_field(*header, "bytes");
  const auto chunks = unsigned_field(*header, "chunks");
  if (!bytes || !chunks || *bytes == 0 || *bytes > kMaxReplyBytes || *chunks == 0 ||
      *chunks != (*bytes + kReplyChunkBytes - 1) / kReplyChunkBytes) {
    return fail("a chunked reply's header is malformed");
  }
  chunked_ = true;
  expected_bytes_ = *bytes;
  chunks_left_ = *chunks;
  text_.reserve(expected_bytes_);
  return Step::NeedMore;
}

ReplyAssembler::Step ReplyAssembler::feed(std::string_view message) {
  if (done_) return fail("a message after the end of the reply");
  if (!chunked_) return start(message);
  if (message.empty() || message.size() > kReplyChunkBytes ||
      message.size() > expected_bytes_ - text_.size()) {
    return fail("a chunk of the reply does not fit its header");
  }
  text_.append(message);
  if (--chunks_left_ > 0) return Step::NeedMore;
  if (text_.size() != expected_bytes_) return fail("the reply's chunks do not add up to its header");
  const std::string text = std::move(text_);
  return finish(text);
}

}  // namespace rrdma::vnic
