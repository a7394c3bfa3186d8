// The CLI's side of a streaming request (capture, trace): connects to a vnic's control
// socket, sends one JSON request, checks the first reply, then hands every message that
// follows to a callback until the daemon's closing summary. SIGINT / SIGTERM (or the
// callback) ask the daemon to stop: it answers with the summary, so that whatever was
// already queued is still delivered and the output is complete.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>

#include <nlohmann/json.hpp>

namespace rrdma::cli {

enum class StreamStep { Continue, Stop };

struct StreamResult {
  bool ok = false;
  std::string error;                    // when !ok
  std::optional<nlohmann::json> start;  // the daemon's first reply
  std::optional<nlohmann::json> summary;  // the closing JSON; nullopt if the daemon vanished
};

// `on_start` runs once the daemon accepted the request (print "capturing..." there);
// `on_message` gets every non-JSON message (a frame, an event) and may ask to stop.
StreamResult run_stream(const std::string& vnic, const nlohmann::json& request,
                        const std::function<void(const nlohmann::json& start)>& on_start,
                        const std::function<StreamStep(std::span<const std::uint8_t> message)>& on_message);

}  // namespace rrdma::cli
