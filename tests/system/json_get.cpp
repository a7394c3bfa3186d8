// rrdma_json_get: reads JSON on stdin and prints one part of it, so the shell tests can
// read `rrdma-vnic status/stats --json` without python or jq.
//
//   rrdma_json_get PATH [FIELD...]
// PATH is dot-separated keys ("icmp.rx_echo_requests"), or "." for the whole document.
//   scalar -> its value (strings without quotes)
//   object -> one "key value" line per scalar member
//   array  -> one line per element: the FIELDs of each element, space-separated
//             (or the element itself when it is a scalar)
// Exit 2 when PATH does not exist, 3 when stdin is not JSON.
#include <cstdio>
#include <iostream>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

namespace {

using nlohmann::json;

std::string scalar_text(const json& v) {
  return v.is_string() ? v.get<std::string>() : v.dump();
}

const json* resolve(const json& root, const std::string& path) {
  const json* at = &root;
  if (path == ".") return at;
  std::stringstream parts(path);
  for (std::string key; std::getline(parts, key, '.');) {
    if (!at->is_object() || !at->contains(key)) return nullptr;
    at = &(*at)[key];
  }
  return at;
}

void print_element(const json& element, int argc, char** argv) {
  if (!element.is_object() || argc <= 2) {
    std::cout << scalar_text(element) << '\n';
    return;
  }
  for (int i = 2; i < argc; ++i) {
    auto field = element.find(argv[i]);
    std::cout << (i > 2 ? " " : "") << (field == element.end() ? "-" : scalar_text(*field));
  }
  std::cout << '\n';
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: rrdma_json_get PATH [FIELD...] < document.json\n");
    return 2;
  }
  json doc = json::parse(std::cin, nullptr, /*allow_exceptions=*/false);
  if (doc.is_discarded()) {
    std::fprintf(stderr, "rrdma_json_get: stdin is not JSON\n");
    return 3;
  }
  const json* value = resolve(doc, argv[1]);
  if (value == nullptr) {
    std::fprintf(stderr, "rrdma_json_get: no %s in the document\n", argv[1]);
    return 2;
  }
  if (value->is_array()) {
    for (const json& element : *value) print_element(element, argc, argv);
  } else if (value->is_object()) {
    for (const auto& [key, member] : value->items())
      if (!member.is_structured()) std::cout << key << ' ' << scalar_text(member) << '\n';
  } else {
    std::cout << scalar_text(*value) << '\n';
  }
  return 0;
}
