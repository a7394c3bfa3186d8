// What must hold for any bytes a local client sends as an admin request on the control
// socket (vnic/control.h: answer(), and the request fields the daemon reads: the trace
// filter of vnic/trace.h), shared by the libFuzzer target (fuzz_admin_json.cpp) and the ctest
// replay of its findings (control_regressions_test.cpp).
//  - answer() returns, and calls the handler exactly when the message is a JSON object with
//    a string "cmd", and then with that object;
//  - the reply is a JSON object that the daemon can serialise (it dumps it with nlohmann's
//    strict UTF-8 handling, which throws on invalid UTF-8: outside any try in
//    ControlServer::serve_admin that would end the daemon), no longer than the request
//    allows, and it parses back to itself; a refused request gets exactly {"error": string};
//  - parse_trace_filter() returns, and a filter it accepts is what the request said: "qp"
//    an integer 0 .. 0xffffff and equal to the filter's QP, the layers a non-empty subset.
// The handler plays the daemon's Daemon::Impl::handle for the commands it knows (vnic/daemon.cpp:
// replies that do not depend on the request, and "unknown command '<cmd>'" that echoes it)
// and the stream commands' request parsing (trace; capture reads no field).
// Returns a description of the first property that fails, or nullptr.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "stack/bytes.h"
#include "vnic/control.h"
#include "vnic/trace.h"

namespace rrdma::fuzz {

// Longest reply a request of n bytes may get: the daemon's own text plus the request's
// command echoed once, escaped (\u00XX: 6 bytes per input byte at most).
inline std::size_t reply_bound(std::size_t request_bytes) { return 512 + 6 * request_bytes; }

inline const char* check_trace_filter(const nlohmann::json& request) {
  std::string error;
  const std::optional<vnic::TraceFilter> filter = vnic::parse_trace_filter(request, error);
  if (!filter) return error.empty() ? "parse_trace_filter: refused without saying why" : nullptr;
  if (filter->layers == 0 || (filter->layers & ~vnic::kAllTraceLayers) != 0) {
    return "parse_trace_filter: layers outside the known ones, or none";
  }
  const auto qp = request.find("qp");
  if ((qp != request.end()) != filter->qpn.has_value()) return "parse_trace_filter: \"qp\" and the filter disagree";
  if (qp == request.end()) return nullptr;
  if (!qp->is_number_integer()) return "parse_trace_filter: accepted a \"qp\" that is not an integer";
  if (*filter->qpn > 0xFFFFFF) return "parse_trace_filter: a QP number over 24 bits";
  const bool same = qp->is_number_unsigned() ? qp->get<std::uint64_t>() == *filter->qpn
                                             : qp->get<std::int64_t>() == static_cast<std::int64_t>(*filter->qpn);
  return same ? nullptr : "parse_trace_filter: the filter's QP is not the request's";
}

inline const char* check_admin_json(ByteSpan input) {
  const std::string_view message(reinterpret_cast<const char*>(input.data()), input.size());
  const auto oracle = nlohmann::json::parse(message, nullptr, /*allow_exceptions=*/false);
  const bool well_formed = !oracle.is_discarded() && oracle.is_object() && oracle.contains("cmd") &&
                           oracle.at("cmd").is_string();

  int calls = 0;
  const char* failed = nullptr;
  const vnic::RequestHandler handler = [&](const nlohmann::json& request, const vnic::PeerCredentials&) {
    ++calls;
    if (!request.is_object() || !request.contains("cmd") || !request.at("cmd").is_string()) {
      failed = "answer: handler called without an object with a string \"cmd\"";
      return nlohmann::json::object();
    }
    if (request != oracle) failed = "answer: handler called with another request than the message's";
    const auto cmd = request["cmd"].get<std::string>();
    if (cmd == "status" || cmd == "stats") return nlohmann::json{{"name", "rv0"}, {"pid", 1}};
    if (cmd == "down") return nlohmann::json{{"ok", true}, {"name", "rv0"}};
    if (cmd == "capture") return nlohmann::json{{"capturing", true}};
    if (cmd == "trace") {
      if (const char* bad = check_trace_filter(request)) failed = bad;
      std::string error;
      if (!vnic::parse_trace_filter(request, error)) return nlohmann::json{{"error", error}};
      return nlohmann::json{{"tracing", true}};
    }
    return nlohmann::json{{"error", "unknown command '" + cmd + "'"}};
  };

  const nlohmann::json reply = vnic::answer(message, vnic::PeerCredentials{1, 1000, 1000}, handler);
  if (failed) return failed;
  if (calls != (well_formed ? 1 : 0)) return "answer: handler called when it should not be, or not when it should";
  if (!reply.is_object()) return "answer: reply is not an object";
  if (!well_formed) {
    const auto error = reply.find("error");
    if (reply.size() != 1 || error == reply.end() || !error->is_string()) return "answer: a refusal is not {\"error\": string}";
  }
  std::string text;
  try {
    text = reply.dump();
  } catch (const nlohmann::json::exception&) {
    return "answer: the reply cannot be serialised (the daemon would throw)";
  }
  if (text.size() > reply_bound(input.size())) return "answer: reply longer than the request allows";
  const auto back = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (back.is_discarded() || back != reply) return "answer: the serialised reply does not parse back to itself";
  return nullptr;
}

}  // namespace rrdma::fuzz
